#include "chat/builtin_templates.h"

#include <array>

namespace leoam::chat {

namespace {

// Prepended to every built-in template.
constexpr std::string_view kContentText = R"({%- macro content_text(content) -%}
  {%- if content is string -%}
    {{- content -}}
  {%- elif content is iterable -%}
    {%- for part in content if part['type'] == 'text' -%}{{- part['text'] -}}{%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
)";

// <|im_start|>role\ncontent<|im_end|>\n per message (Qwen, many fine-tunes).
constexpr std::string_view kChatml = R"({%- for message in messages -%}
  {{- '<|im_start|>' + message['role'] + '\n' + content_text(message['content']) + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)";

// <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST]
// The prompt always ends ready for an answer, so add_generation_prompt changes nothing.
constexpr std::string_view kLlama2 = R"({%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system = content_text(messages[0]['content']) | trim -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = '' -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if message['role'] == 'user' -%}
    {%- set content = content_text(message['content']) | trim -%}
    {%- if loop.first and system -%}
      {%- set content = '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content -%}
    {%- endif -%}
    {{- bos_token + '[INST] ' + content + ' [/INST]' -}}
  {%- elif message['role'] == 'assistant' -%}
    {{- ' ' + content_text(message['content']) | trim + ' ' + eos_token -}}
  {%- elif message['role'] == 'system' -%}
    {{- raise_exception('the llama2 template takes one system message, the first') -}}
  {%- else -%}
    {{- raise_exception('the llama2 template takes system, user and assistant messages, not ' + message['role']) -}}
  {%- endif -%}
{%- endfor -%}
)";

// <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>...
constexpr std::string_view kLlama3 = R"({{- bos_token -}}
{%- for message in messages -%}
  {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' -}}
  {{- content_text(message['content']) | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)";

// <bos><start_of_turn>user\ncontent<end_of_turn>\n<start_of_turn>model\n...; Gemma has no system
// role, so system text opens the next user turn.
constexpr std::string_view kGemma = R"({{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {%- set ns.system = ns.system + content_text(message['content']) | trim + '\n\n' -%}
  {%- else -%}
    {%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}
    {{- '<start_of_turn>' + role + '\n' + (ns.system if role == 'user' else '') -}}
    {{- content_text(message['content']) | trim + '<end_of_turn>\n' -}}
    {%- if role == 'user' -%}
      {%- set ns.system = '' -%}
    {%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<start_of_turn>model\n' -}}
{%- endif -%}
)";

struct NamedTemplate {
  std::string_view name;
  std::string_view source;
};

constexpr std::array<NamedTemplate, 4> kBuiltins = {{
    {"chatml", kChatml},
    {"llama2", kLlama2},
    {"llama3", kLlama3},
    {"gemma", kGemma},
}};

}  // namespace

Result<std::string> builtin_template(std::string_view name) {
  std::string known;
  for (const NamedTemplate& t : kBuiltins) {
    if (t.name == name) return std::string(kContentText) + std::string(t.source);
    known += (known.empty() ? "" : ", ") + std::string(t.name);
  }
  return not_found("no built-in chat template named '" + std::string(name) + "'; known: " + known);
}

}  // namespace leoam::chat
