#include "server/tool_call_parser.h"

#include <algorithm>

namespace leoam::server {
namespace {

using json = nlohmann::json;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

// A call object of one of `functions`: {"name", "arguments" or "parameters" (an object, or a
// string holding one)}.
std::optional<ParsedToolCall> call_of(const json& j, const std::vector<std::string>& functions) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const std::string name = j["name"];
  if (std::find(functions.begin(), functions.end(), name) == functions.end()) return std::nullopt;
  json args = j.contains("arguments") ? j["arguments"] : j.contains("parameters") ? j["parameters"] : json::object();
  if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) return std::nullopt;
  return ParsedToolCall{name, std::move(args)};
}

}  // namespace

std::optional<std::vector<ParsedToolCall>> parse_tool_calls(std::string_view text, const std::vector<std::string>& functions) {
  std::vector<ParsedToolCall> calls;
  // Hermes and Qwen: every <tool_call> block.
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  for (size_t at = text.find(kOpen); at != std::string_view::npos; at = text.find(kOpen, at)) {
    const size_t body = at + kOpen.size();
    const size_t end = text.find(kClose, body);
    if (end == std::string_view::npos) return std::nullopt;  // cut short: not a call
    const std::optional<ParsedToolCall> c = call_of(json::parse(trim(text.substr(body, end - body)), nullptr, false), functions);
    if (!c) return std::nullopt;
    calls.push_back(*c);
    at = end + kClose.size();
  }
  if (!calls.empty()) return calls;
  std::string_view t = trim(text);
  // Mistral: [TOOL_CALLS] and an array of calls.
  constexpr std::string_view kMistral = "[TOOL_CALLS]";
  if (t.substr(0, kMistral.size()) == kMistral) {
    const json list = json::parse(trim(t.substr(kMistral.size())), nullptr, false);
    if (!list.is_array() || list.empty()) return std::nullopt;
    for (const json& j : list) {
      const std::optional<ParsedToolCall> c = call_of(j, functions);
      if (!c) return std::nullopt;
      calls.push_back(*c);
    }
    return calls;
  }
  // Llama 3: the whole answer one call object.
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  if (t.substr(0, kPythonTag.size()) == kPythonTag) t = trim(t.substr(kPythonTag.size()));
  if (!t.empty() && t.front() == '{') {
    if (const std::optional<ParsedToolCall> c = call_of(json::parse(t, nullptr, false), functions)) return std::vector{*c};
  }
  return std::nullopt;
}

}  // namespace leoam::server
