// Chat templates: the Jinja2 templates that GGUF files carry in `tokenizer.chat_template`, turned
// into prompt text. The engine implements the part of Jinja2 that real chat templates use, with
// Hugging Face transformers' environment (trim_blocks, lstrip_blocks, loop controls, tojson with
// ensure_ascii=False, raise_exception, strftime_now), and renders byte for byte what python-jinja2
// renders there. Parsed templates are immutable: render() may run on many threads at once.
//
//   LEOAM_ASSIGN_OR_RETURN(auto t, ChatTemplate::parse(source));
//   LEOAM_ASSIGN_OR_RETURN(std::string prompt, render_chat(t, messages, true, "<s>", "</s>"));
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/builtin_templates.h"
#include "chat/template_options.h"
#include "core/status.h"

namespace leoam::chat {

struct Stmt;  // template_ast.h
class Value;  // template_value.h

class ChatTemplate {
 public:
  // A syntax error is kInvalidArgument naming line, column and what was expected.
  static Result<ChatTemplate> parse(std::string_view source, const TemplateOptions& options = {});

  // `context` (a JSON object) gives the template's variables: messages, add_generation_prompt,
  // bos_token, eos_token, tools, ... Runtime errors (an undefined value used, a type error,
  // raise_exception(msg) in the template) are kInvalidArgument "line N: <message>".
  Result<std::string> render(const nlohmann::json& context, const RenderOptions& options = {}) const;
  // The same, keeping the context's key order (as Python dicts do) where the template prints
  // objects, e.g. tool schemas through tojson; nlohmann::json sorts keys.
  Result<std::string> render_ordered(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const std::vector<Stmt>> program) : program_(std::move(program)) {}
  Result<std::string> render_value(const Value& context, const RenderOptions& options) const;

  std::shared_ptr<const std::vector<Stmt>> program_;  // the parsed template
};

// The usual context of a chat: {"messages", "add_generation_prompt", "bos_token", "eos_token"},
// and "tools" (OpenAI's array of function tools) unless `tools` is null.
Result<std::string> render_chat(const ChatTemplate& t, const nlohmann::json& messages, bool add_generation_prompt,
                                std::string_view bos_token, std::string_view eos_token,
                                const nlohmann::json& tools = nullptr);

}  // namespace leoam::chat
