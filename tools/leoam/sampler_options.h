// The sampling flags of the subcommands that generate text (`run`, and `serve`, where they are
// the defaults of requests that do not set them): --temp, --top-k, --top-p, --min-p,
// --repeat-penalty and --repeat-last-n.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/sampler.h"

namespace leoam::cli {

void add_sampler_options(CLI::App& cmd, SamplerOptions& options);

}  // namespace leoam::cli
