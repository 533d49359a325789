// Runs a parsed template against a context. Scoping is Jinja2's: `set` at the top level or inside
// if/elif/else binds for the rest of the template; each for-loop iteration, macro call and filter
// or generation block has a scope of its own, so `set` there does not leak out (use namespace()).
// Names resolve through the scopes, then the context, then the global functions.
// Runtime errors are kInvalidArgument "line N: what" (raise_exception's message as the what).
#pragma once

#include <string>

#include "chat/template_ast.h"
#include "chat/template_options.h"
#include "chat/template_value.h"
#include "core/status.h"

namespace leoam::chat {

// `context` is a dict of the template's variables.
Result<std::string> render_template(const Body& program, const Value& context, const RenderOptions& options);

}  // namespace leoam::chat
