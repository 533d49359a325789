#include "chat/chat_template.h"

#include "chat/template_ast.h"
#include "chat/template_interpreter.h"
#include "chat/template_json.h"
#include "chat/template_lexer.h"
#include "chat/template_parser.h"

namespace leoam::chat {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source, const TemplateOptions& options) {
  LEOAM_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize_template(source, options));
  LEOAM_ASSIGN_OR_RETURN(Body program, parse_template(std::move(tokens)));
  return ChatTemplate(std::make_shared<const Body>(std::move(program)));
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context, const RenderOptions& options) const {
  if (!context.is_object()) return invalid_argument("chat template context must be a JSON object");
  return render_value(value_from_json(context), options);
}

Result<std::string> ChatTemplate::render_ordered(const nlohmann::ordered_json& context,
                                                 const RenderOptions& options) const {
  if (!context.is_object()) return invalid_argument("chat template context must be a JSON object");
  return render_value(value_from_json(context), options);
}

Result<std::string> ChatTemplate::render_value(const Value& context, const RenderOptions& options) const {
  return render_template(*program_, context, options);
}

Result<std::string> render_chat(const ChatTemplate& t, const nlohmann::json& messages, bool add_generation_prompt,
                                std::string_view bos_token, std::string_view eos_token, const nlohmann::json& tools) {
  nlohmann::json context = {{"messages", messages},
                            {"add_generation_prompt", add_generation_prompt},
                            {"bos_token", std::string(bos_token)},
                            {"eos_token", std::string(eos_token)}};
  if (!tools.is_null()) context["tools"] = tools;
  return t.render(context);
}

}  // namespace leoam::chat
