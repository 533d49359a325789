// Errors: syntax errors name line, column and what was expected; runtime errors name the line;
// raise_exception carries the template's message; unknown filters and tests are named.
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"

namespace leoam::chat {
namespace {

std::string parse_error(std::string_view source) {
  auto t = ChatTemplate::parse(source);
  if (t.is_ok()) return "parsed";
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  return t.status().message();
}

std::string render_error(std::string_view source, const nlohmann::json& context = nlohmann::json::object()) {
  auto t = ChatTemplate::parse(source);
  if (!t.is_ok()) return "parse: " + t.status().message();
  auto out = t->render(context);
  if (out.is_ok()) return "rendered: " + *out;
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  return out.status().message();
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineColumnAndExpectation) {
  EXPECT_EQ(parse_error("line one\n{{ 1 + }}"),
            "template syntax error at line 2, column 8: unexpected '}}'");
  EXPECT_EQ(parse_error("{% for x in xs %}\n  {{ x }}\n"),  // the source's last newline is dropped first
            "template syntax error at line 2, column 10: unexpected end of template; expected 'endfor' or 'else' to "
            "close the 'for' at line 1");
  EXPECT_EQ(parse_error("{% if a %}x{% endfor %}"),
            "template syntax error at line 1, column 15: unknown tag 'endfor'; expected 'elif', 'else' or 'endif' to "
            "close the 'if' at line 1");
  EXPECT_EQ(parse_error("{% for x xs %}{% endfor %}"),
            "template syntax error at line 1, column 10: expected 'in', got 'xs'");
  EXPECT_EQ(parse_error("ab\n  {{ (1, 2 }}"),
            "template syntax error at line 2, column 12: unexpected '}'; expected ')'");
  EXPECT_EQ(parse_error("{{ 'open }}"), "template syntax error at line 1, column 4: unterminated string literal");
  EXPECT_EQ(parse_error("{{ x "), "template syntax error at line 1, column 6: unexpected end of template; "
                                  "expected '}}' to close the tag opened at line 1, column 1");
  EXPECT_EQ(parse_error("{# never closed"), "template syntax error at line 1, column 1: missing '#}' to end this comment");
  EXPECT_EQ(parse_error("{% frobnicate %}"), "template syntax error at line 1, column 4: unknown tag 'frobnicate'");
  EXPECT_EQ(parse_error("{% include 'x' %}"),
            "template syntax error at line 1, column 4: the 'include' tag is not supported in chat templates");
  EXPECT_EQ(parse_error("{% break %}"), "template syntax error at line 1, column 4: 'break' outside a for loop");
  EXPECT_EQ(parse_error("{{ a ! b }}"), "template syntax error at line 1, column 6: unexpected character '!'");
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheMessage) {
  EXPECT_EQ(render_error("ok\n{% if messages|length == 0 %}{{ raise_exception('No messages given') }}{% endif %}",
                         {{"messages", nlohmann::json::array()}}),
            "line 2: No messages given");
}

TEST(ChatTemplateErrors, UnknownFilterAndTestAreNamed) {
  EXPECT_EQ(render_error("{{ 'x' | shout }}"), "line 1: no filter named 'shout'");
  EXPECT_EQ(render_error("{{ 'x' is shouty }}"), "line 1: no test named 'shouty'");
  // As in Jinja2 3.1, only when reached.
  EXPECT_EQ(render_error("{% if false %}{{ 'x' | shout }}{% endif %}ok"), "rendered: ok");
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheInnermostLine) {
  EXPECT_EQ(render_error("a\n{% for m in messages %}\n{{ m.content + 1 }}\n{% endfor %}",
                         {{"messages", {{{"content", "x"}}}}}),
            "line 3: TypeError: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render_error("{% macro m() %}\n{{ undefined_fn() }}{% endmacro %}\n{{ m() }}"),
            "line 2: 'undefined_fn' is undefined");
  EXPECT_EQ(render_error("{{ 'abc'() }}"), "line 1: TypeError: 'str' object is not callable");
  EXPECT_EQ(render_error("{{ messages.append(1) }}", {{"messages", nlohmann::json::array()}}),
            "line 1: access to 'append' of a 'list' is unsafe: templates cannot modify their inputs");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.a = 2 %}"), "line 1: cannot assign attribute on non-namespace object");
  EXPECT_EQ(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "line 1: macro 'f' recursed too deeply");
  EXPECT_EQ(render_error("{{ range(200000)|length }}"),
            "line 1: OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
}

TEST(ChatTemplateErrors, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(parse_error(deep).find("nested too deeply"), std::string::npos);
}

}  // namespace
}  // namespace leoam::chat
