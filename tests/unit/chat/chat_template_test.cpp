// ChatTemplate's API and the language pieces with exact expected output (no python needed):
// whitespace control under transformers' flags, loops, scoping, namespace, macros, filters,
// undefined values, JSON context conversion, strftime_now and concurrent renders.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace leoam::chat {
namespace {

using nlohmann::json;

std::string render(std::string_view source, const json& context = json::object(), const TemplateOptions& options = {}) {
  auto t = ChatTemplate::parse(source, options);
  if (!t.is_ok()) return "PARSE ERROR: " + t.status().message();
  auto out = t->render(context);
  if (!out.is_ok()) return "RENDER ERROR: " + out.status().message();
  return *out;
}

TEST(ChatTemplate, PrintsPythonStrOfValues) {
  const json ctx = {{"s", "x"}, {"i", 3}, {"f", 2.0}, {"b", true}, {"n", nullptr}, {"l", {1, "a", nullptr}},
                    {"d", {{"k", "it's"}}}};
  EXPECT_EQ(render("{{ s }}|{{ i }}|{{ f }}|{{ b }}|{{ n }}|{{ l }}|{{ d }}|{{ missing }}|", ctx),
            "x|3|2.0|True|None|[1, 'a', None]|{'k': \"it's\"}||");
}

TEST(ChatTemplate, TrimAndLstripBlocksAreOnByDefault) {
  const std::string source = "<s>\n  {% for m in messages %}\n  [{{ m }}]\n  {% endfor %}\n</s>\n";
  const json ctx = {{"messages", {"a", "b"}}};
  EXPECT_EQ(render(source, ctx), "<s>\n  [a]\n  [b]\n</s>");
  TemplateOptions jinja_defaults;
  jinja_defaults.trim_blocks = false;
  jinja_defaults.lstrip_blocks = false;
  EXPECT_EQ(render(source, ctx, jinja_defaults), "<s>\n  \n  [a]\n  \n  [b]\n  \n</s>");
  jinja_defaults.keep_trailing_newline = true;
  EXPECT_EQ(render("x\n", json::object(), jinja_defaults), "x\n");
}

TEST(ChatTemplate, WhitespaceControlMarkers) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n  {#- comment -#}\n  b"), "ab");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
}

TEST(ChatTemplate, LoopVariablesFilterAndElse) {
  const json ctx = {{"xs", {1, 2, 3, 4}}};
  EXPECT_EQ(render("{% for x in xs if x is even %}{{ loop.index }}/{{ loop.length }}={{ x }}"
                   "{{ ',' if not loop.last }}{% endfor %}",
                   ctx),
            "1/2=2,2/2=4");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ loop.first }}{{ loop.revindex }} {% endfor %}", ctx),
            "0True4 1False3 2False2 3False1 ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx), "12");
}

TEST(ChatTemplate, SetInsideLoopStaysInTheIterationButNamespaceCarries) {
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "120");
  EXPECT_EQ(render("{% set ns = namespace(x=0) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"),
            "3");
  EXPECT_EQ(render("{% if true %}{% set y = 'kept' %}{% endif %}{{ y }}"), "kept");
}

TEST(ChatTemplate, MacrosTakeDefaultsAndKeywords) {
  EXPECT_EQ(render("{% macro tag(name, open=true) %}<{{ '' if open else '/' }}{{ name }}>{% endmacro %}"
                   "{{ tag('a') }}{{ tag('a', open=false) }}{{ tag(name='b') | upper }}"),
            "<a></a><B>");
}

TEST(ChatTemplate, UndefinedIsEmptyAndFalsyButUsingItFails) {
  EXPECT_EQ(render("[{{ nope }}]{{ nope is defined }}{{ 'y' if not nope }}{{ nope|default('d') }}{{ nope|length }}"),
            "[]Falseyd0");
  EXPECT_EQ(render("{{ {'a': 1}.b is defined }}{{ none.x is defined }}"), "FalseFalse");
  EXPECT_EQ(render("{{ nope.x }}"), "RENDER ERROR: line 1: 'nope' is undefined");
  EXPECT_EQ(render("{{ nope + 1 }}"), "RENDER ERROR: line 1: 'nope' is undefined");
  EXPECT_EQ(render("{{ nope() }}"), "RENDER ERROR: line 1: 'nope' is undefined");
}

TEST(ChatTemplate, TojsonIsJsonDumpsWithoutAsciiEscapes) {
  const json ctx = {{"tool", {{"name", "f"}, {"desc", "naïve \"q\" <b>"}, {"args", {1, 2.5, nullptr, true}}}}};
  EXPECT_EQ(render("{{ tool|tojson }}", ctx),
            "{\"args\": [1, 2.5, null, true], \"desc\": \"naïve \\\"q\\\" <b>\", \"name\": \"f\"}");
  EXPECT_EQ(render("{{ [1, {'a': []}]|tojson(indent=2) }}"), "[\n  1,\n  {\n    \"a\": []\n  }\n]");
  EXPECT_EQ(render("{{ 'é'|tojson(ensure_ascii=true) }}"), "\"\\u00e9\"");
}

TEST(ChatTemplate, RenderOrderedKeepsKeyOrder) {
  auto t = ChatTemplate::parse("{{ tool|tojson }} {% for k in tool %}{{ k }}{% endfor %}");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  nlohmann::ordered_json ctx;
  ctx["tool"]["name"] = "f";
  ctx["tool"]["description"] = "d";
  auto ordered = t->render_ordered(ctx);
  ASSERT_TRUE(ordered.is_ok()) << ordered.status().message();
  EXPECT_EQ(*ordered, "{\"name\": \"f\", \"description\": \"d\"} namedescription");
  auto sorted = t->render(json(ctx));
  ASSERT_TRUE(sorted.is_ok());
  EXPECT_EQ(*sorted, "{\"description\": \"d\", \"name\": \"f\"} descriptionname");
}

TEST(ChatTemplate, StrftimeNowFormatsTheGivenTime) {
  auto t = ChatTemplate::parse("Today Date: {{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(t.is_ok());
  RenderOptions options;
  std::tm now{};
  now.tm_year = 2024 - 1900;
  now.tm_mon = 6;
  now.tm_mday = 23;
  options.now = now;
  auto out = t->render(json::object(), options);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "Today Date: 23 Jul 2024");
  auto current = t->render(json::object());
  ASSERT_TRUE(current.is_ok());
  EXPECT_EQ(current->size(), out->size());
}

TEST(ChatTemplate, RenderChatBuildsTheUsualContext) {
  auto t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  ASSERT_TRUE(t.is_ok());
  const json messages = json::parse(R"([{"role": "user", "content": "hi"}])");
  auto out = render_chat(*t, messages, true, "<s>", "</s>");
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "<s><user>hi</s><assistant>");
  auto no_prompt = render_chat(*t, messages, false, "<s>", "</s>");
  ASSERT_TRUE(no_prompt.is_ok());
  EXPECT_EQ(*no_prompt, "<s><user>hi</s>");
}

TEST(ChatTemplate, RendersConcurrentlyFromOneParse) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m|length %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.is_ok());
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(8);
  for (size_t i = 0; i < outputs.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        auto out = t->render({{"messages", std::vector<std::string>(i + 1, "abc")}});
        outputs[i] = out.is_ok() ? *out : out.status().message();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < outputs.size(); ++i) EXPECT_EQ(outputs[i], std::to_string(3 * (i + 1)));
}

TEST(ChatTemplate, ContextMustBeAnObject) {
  auto t = ChatTemplate::parse("x");
  ASSERT_TRUE(t.is_ok());
  auto out = t->render(json::array());
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leoam::chat
