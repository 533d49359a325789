// The held-out retrieval tasks: generators built apart from the development tasks of task.cpp,
// with their own filler, needle phrasing and question form, so that a policy tuned on the
// development tasks can be checked on text it was never tuned on (docs/evaluation.md, held-out
// sets). Choose a change while looking at the development tasks; run these only to check it.
#pragma once

#include <optional>
#include <random>
#include <string_view>

#include "eval/task_text.h"

namespace leoam::eval {

// The text of held-out task `task` drawn from `rng` (its filler included); nullopt for a name
// that is not a held-out task (heldout_task_names in task.h).
std::optional<TaskText> heldout_task_text(std::string_view task, std::mt19937_64& rng);

}  // namespace leoam::eval
