// JSON in and out of templates: the render context arrives as nlohmann JSON, and the tojson filter
// writes values back as Python's json.dumps does (Hugging Face's tojson, not Jinja2's HTML-safe one).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template_value.h"
#include "core/status.h"

namespace leoam::chat {

// Objects keep the JSON type's key order: sorted for nlohmann::json, insertion for ordered_json.
Value value_from_json(const nlohmann::json& j);
Value value_from_json(const nlohmann::ordered_json& j);

// json.dumps(value, ensure_ascii=, indent=, separators=, sort_keys=).
struct JsonDumpOptions {
  bool ensure_ascii = false;          // Hugging Face's default; json.dumps' own is true
  std::optional<std::string> indent;  // unset: one line
  std::optional<std::string> item_separator;  // unset: ", " on one line, "," with indent
  std::string key_separator = ": ";
  bool sort_keys = false;
};
Result<std::string> dump_json(const Value& v, const JsonDumpOptions& options);

}  // namespace leoam::chat
