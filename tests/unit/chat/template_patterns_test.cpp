// Whole templates in the styles real models use (written for this test: Llama 3.1 tool calling
// with a date, Mistral [INST], Phi-3, Hermes tool schemas, a recursive schema macro, generation
// blocks), each over a set of conversations, against python-jinja2. Skipped without python3-jinja2.
#include <gtest/gtest.h>

#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include "chat_test_util.h"

namespace leoam::chat {
namespace {

using nlohmann::json;
using testing_util::ReferenceCase;

// Llama 3.1 style: a system header with the date (strftime_now unless date_string is given),
// tools as JSON in the first user message, tool calls as JSON, ipython results.
constexpr const char* kLlama31Style = R"jinja({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- The system message, if any, comes out of the loop #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to these functions:\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- if tools_in_user_message and not tools is none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, respond with a JSON function call.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)jinja";

// Mistral style: the system prompt joins the last user turn; roles must alternate.
constexpr const char* kMistralStyle = R"jinja({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.last and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content']|trim + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
)jinja";

// Phi-3 style, without whitespace control: trim_blocks and lstrip_blocks do the work.
constexpr const char* kPhi3Style = R"jinja({% for message in messages %}
    {% if message['role'] == 'system' %}
<|system|>
{{ message['content'] }}<|end|>
    {% elif message['role'] == 'user' %}
<|user|>
{{ message['content'] }}<|end|>
    {% elif message['role'] == 'assistant' %}
<|assistant|>
{{ message['content'] }}<|end|>
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% else %}
{{ eos_token }}
{% endif %}
)jinja";

// Hermes style: tool signatures through a recursive macro over the JSON schema, and
// <tool_call> blocks with arguments as JSON.
constexpr const char* kHermesStyle = R"jinja({%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {
    "string": "str",
    "number": "float",
    "integer": "int",
    "boolean": "bool"
} %}

{%- if basic_type_map[json_spec.type] is defined %}
    {{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}
    {{- "list[" +  json_to_python_type(json_spec["items"]) + "]"}}
{%- elif json_spec.type == "object" %}
    {%- if json_spec.additionalProperties is defined %}
        {{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + ']'}}
    {%- else %}
        {{- "dict" }}
    {%- endif %}
{%- elif json_spec.type is iterable and json_spec.type is not string %}
    {{- "Union[" }}
    {%- for t in json_spec.type %}
      {{- json_to_python_type({"type": t}) }}
      {%- if not loop.last %}
        {{- "," }}
    {%- endif %}
    {%- endfor %}
    {{- "]" }}
{%- else %}
    {{- "Any" }}
{%- endif %}
{%- endmacro %}

{{- bos_token }}
{{- "<|im_start|>system\nYou are a function calling AI model. Here are the available tools: <tools> " }}
{%- for tool in tools %}
    {%- if tool.function is defined %}
        {%- set tool = tool.function %}
    {%- endif %}
    {{- '{"type": "function", "function": ' }}
    {{- '{"name": "' + tool.name + '", ' }}
    {{- '"description": "' + tool.name + '(' }}
    {%- for param_name, param_fields in tool.parameters.properties|items %}
        {{- param_name + ": " + json_to_python_type(param_fields) }}
        {%- if not loop.last %}
            {{- ", " }}
        {%- endif %}
    {%- endfor %}
    {{- ")" }}
    {%- if tool.return is defined %}
        {{- " -> " + json_to_python_type(tool.return) }}
    {%- endif %}
    {{- " - " + tool.description + "\n\n" }}
    {{- '", "parameters": ' }}
    {%- if tool.parameters.properties | length == 0 %}
        {{- "{}" }}
    {%- else %}
        {{- tool.parameters|tojson }}
    {%- endif %}
    {{- "}" }}
    {%- if not loop.last %}
        {{- "\n" }}
    {%- endif %}
{%- endfor %}
{{- " </tools><|im_end|>\n" }}
{%- for message in messages %}
    {%- if message.role == "user" or message.role == "system" or (message.role == "assistant" and message.tool_calls is not defined) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
    {%- for tool_call in message.tool_calls %}
       {{- '\n<tool_call>\n' }}
           {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '{' }}
            {{- '"name": "' }}
            {{- tool_call.name }}
            {{- '"' }}
            {{- ', '}}
            {%- if tool_call.arguments is defined %}
                {{- '"arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments|tojson }}
                {%- endif %}
            {%- endif %}
             {{- '}' }}
            {{- '\n</tool_call>' }}
    {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>tool\n' }}
        {%- endif %}
        {{- '<tool_response>\n' }}
        {{- message.content }}
        {%- if not loop.last %}
            {{- '\n</tool_response>\n' }}
        {%- else %}
            {{- '\n</tool_response>' }}
        {%- endif %}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>' }}
        {%- elif loop.last %}
            {{- '<|im_end|>' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)jinja";

// Odds and ends: generation blocks, selectattr/map/join, split, string methods, dict literals.
constexpr const char* kMiscStyle = R"jinja({%- set system = messages|selectattr('role', 'equalto', 'system')|map(attribute='content')|join('\n') %}
{%- set turns = messages|rejectattr('role', 'equalto', 'system')|list %}
{%- set names = {'user': 'Human', 'assistant': 'Assistant'} %}
{%- if system %}{{ system.upper()[:20] }}{{ '\n\n' }}{% endif %}
{%- for m in turns %}
    {%- set name = names[m.role] | default(m.role | capitalize) %}
    {%- if m.role == 'assistant' %}
        {{- name }}: {% generation %}{{ m.content.split('</think>')[-1].strip() }}{% endgeneration %}
    {%- else %}
        {{- name }}: {{ m.content | replace('\n', ' ') | trim }}
    {%- endif %}
    {{- '\n' if not loop.last }}
{%- endfor %}
{%- if add_generation_prompt %}
{{ '\nAssistant:' }}
{%- endif %}
)jinja";

constexpr const char* kToolsJson = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Get the weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "hourly": {"type": "boolean"},
    "fields": {"type": "array", "items": {"type": "string"}},
    "extra": {"type": "object", "additionalProperties": {"type": "number"}},
    "unit": {"type": ["string", "null"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {"type": "object",
    "properties": {}}}}])";

const std::vector<const char*> kChats = {
    R"([{"role": "user", "content": "Hi there"}])",
    R"([{"role": "system", "content": "  You are terse.\n"}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>greet</think>\n Hello!"}, {"role": "user", "content": "Weather?\nIn Paris."}])",
    R"([{"role": "system", "content": "Tools ok."}, {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "21 and sunny. ✓"}])",
    R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])",
    R"([{"role": "user", "content": "ünïcode \"quotes\" 'single' \\ {{ braces }} 🎉"},
        {"role": "assistant", "content": "ok"}])",
};

TEST(TemplatePatterns, RenderLikePythonJinja2) {
  const std::vector<std::pair<const char*, const char*>> templates = {
      {"llama3.1-style", kLlama31Style}, {"mistral-style", kMistralStyle}, {"phi3-style", kPhi3Style},
      {"hermes-style", kHermesStyle},   {"misc", kMiscStyle},
  };
  std::tm now{};
  now.tm_year = 2024 - 1900;
  now.tm_mon = 8;
  now.tm_mday = 5;
  std::vector<ReferenceCase> cases;
  std::vector<std::string> labels;
  for (const auto& [name, source] : templates) {
    for (size_t i = 0; i < kChats.size(); ++i) {
      for (int variant = 0; variant < 4; ++variant) {
        json context = {{"messages", json::parse(kChats[i])},
                        {"add_generation_prompt", variant % 2 == 1},
                        {"bos_token", "<s>"},
                        {"eos_token", "</s>"}};
        if (variant >= 2) context["tools"] = json::parse(kToolsJson);
        if (variant == 3) context["date_string"] = "26 Jul 2024";
        cases.push_back({source, context, {}, now});
        labels.push_back(std::string(name) + " chat " + std::to_string(i) + " variant " + std::to_string(variant));
      }
    }
  }
  std::string why;
  const auto expected = testing_util::render_with_jinja2(cases, &why);
  if (!expected) GTEST_SKIP() << why;
  ASSERT_EQ(expected->size(), cases.size());
  const int n_text = testing_util::expect_same_as_jinja2(cases, *expected, labels);
  std::cout << "[ chat     ] template patterns: " << n_text << " of " << cases.size()
            << " renders identical, " << cases.size() - static_cast<size_t>(n_text) << " failed in both engines\n";
}

}  // namespace
}  // namespace leoam::chat
