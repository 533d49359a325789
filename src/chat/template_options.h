// Options of the template environment (fixed when a template is parsed) and of one render. The
// defaults are Hugging Face transformers' chat-template environment: trim_blocks and lstrip_blocks
// on, trailing newline dropped.
#pragma once

#include <ctime>
#include <optional>

namespace leoam::chat {

struct TemplateOptions {
  bool trim_blocks = true;             // drop the first newline after a block tag or comment
  bool lstrip_blocks = true;           // drop spaces and tabs before a block tag or comment on its line
  bool keep_trailing_newline = false;  // keep the single newline that ends the template source
};

struct RenderOptions {
  std::optional<std::tm> now;  // the local time strftime_now() formats; unset: the current time
};

}  // namespace leoam::chat
