// The tool calls in a model's free answer (tool_choice "auto"), in the syntaxes that chat
// templates teach their models:
//
//   <tool_call>{"name": ..., "arguments": {...}}</tool_call>   Hermes, Qwen 2.5 (one block a call)
//   [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]       Mistral
//   {"name": ..., "parameters": {...}}                         Llama 3.1 and 3.2 (the whole
//                                                              answer, after <|python_tag|> or not)
//
// Only calls of the request's own functions count; an answer that holds none is text.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace leoam::server {

struct ParsedToolCall {
  std::string name;
  nlohmann::json arguments;  // an object
};

// The calls `text` makes of `functions` (their names); nullopt when it makes none (it is text).
std::optional<std::vector<ParsedToolCall>> parse_tool_calls(std::string_view text, const std::vector<std::string>& functions);

}  // namespace leoam::server
