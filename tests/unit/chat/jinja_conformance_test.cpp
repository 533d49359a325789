// The template language against python-jinja2, snippet by snippet: each renders byte for byte as
// python-jinja2 renders it in Hugging Face's environment, or fails in both. Skipped without
// python3-jinja2.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat_test_util.h"

namespace leoam::chat {
namespace {

using testing_util::ReferenceCase;

struct Snippet {
  const char* source;
  const char* context = "{}";
};

// The context most snippets read.
constexpr const char* kData = R"({"s": "Hello, World", "n": 7, "f": 2.5, "t": true, "z": null, "e": "",
  "items": [3, 1, 2], "words": ["b", "A", "a", "c"], "d": {"b": 1, "a": [1, 2.5, null, true, "x\"y"]},
  "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": " hi "},
           {"role": "assistant", "content": "yo"}, {"role": "user", "content": "bye"}],
  "u": "naïve 日本 🎉", "q": "it's \"quoted\"\n\ttab\\"})";

const std::vector<Snippet> kSnippets = {
    // printing and literals
    {"{{ s }}|{{ n }}|{{ f }}|{{ t }}|{{ z }}|{{ missing }}|{{ e }}", kData},
    {"{{ 'a' \"b\" }}{{ 1_000 }}{{ 0x1F }}{{ 1.5e3 }}{{ 1e-7 }}{{ 10.0 }}{{ 1e16 }}{{ 123456789012345678.0 }}"},
    {"{{ 'a\\tb\\n\\x41\\u00e9\\U0001F389\\101\\\\\\'\\q' }}"},
    {"{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}, (1,), ()] }}"},
    {"{{ d }}{{ msgs[0] }}{{ q }}|{{ [q, u] }}", kData},
    {"{{ (1, 2) }}{{ 1, 2 }}{{ True }}{{ False }}{{ None }}"},
    // arithmetic and operators
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}"},
    {"{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }}"},
    {"{{ 'ab' * 3 }}{{ 2 * 'x' }}{{ [1] * 2 }}{{ [1] + [2] }}{{ 'a' + 'b' }}{{ true + 1 }}{{ 3 - 1.5 }}"},
    {"{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] ~ missing }}{{ 'a' ~ 1 + 2 ~ 'b' }}"},
    {"{{ 'a' + 1 }}"},
    {"{{ none + 'x' }}"},
    {"{{ missing + 1 }}"},
    {"{{ 1 / 0 }}"},
    {"{{ '%s-%d %05.2f %%' % ('a', 3, 2.5) }}{{ 'x=%s' % 5 }}{{ 'v: %r' % 'q' }}"},
    // comparisons and logic
    {"{{ 1 == 1.0 }}{{ 1 != 2 }}{{ 'a' < 'b' }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ [1, 2] == [1, 2] }}{{ (1, 2) == [1, 2] }}"},
    {"{{ 'ab' in 'cabd' }}{{ 1 in [1, 2] }}{{ 'a' in {'a': 1} }}{{ 'z' not in 'abc' }}{{ 'x' in missing }}"},
    {"{{ x or 'y' }}|{{ 0 and 5 }}|{{ 3 and 5 }}|{{ not missing }}|{{ not 1 == 2 }}|{{ '' or [] or 'last' }}"},
    {"{{ 'yes' if t else 'no' }}|{{ 'yes' if z else 'no' }}|{{ 1 if false }}|{{ 'a' if false else 'b' if t else 'c' }}", kData},
    {"{{ 'a' < 1 }}"},
    {"{{ missing == missing }}{{ missing == none }}{{ none == none }}{{ {'a': 1} == {'a': 1} }}"},
    // tests
    {"{% for v in [s, n, f, t, z, missing, items, d, e] %}{{ v is defined }}{{ v is undefined }}{{ v is none }}"
     "{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is mapping }}"
     "{{ v is iterable }}{{ v is sequence }}{{ v is true }}{{ v is false }};{% endfor %}",
     kData},
    {"{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 'ab' is lower }}{{ 'AB' is upper }}"
     "{{ 2 is eq 2 }}{{ 2 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is ge 3 }}{{ 1 is in [1] }}{{ none is sameas none }}"
     "{{ range is callable }}{{ 5 is not none }}{{ x is not defined }}"},
    // attribute and item access
    {"{{ msgs[1].role }}|{{ msgs[1]['content'] }}|{{ msgs[-1].content }}|{{ msgs.0.role }}|{{ d.a[1] }}|{{ d['b'] }}", kData},
    {"{{ d.nope }}|{{ d['nope'] }}|{{ items[10] }}|{{ s.nope }}|{{ z.x }}|{{ none['x'] }}|{{ items['x'] }}", kData},
    {"{{ missing.x }}"},
    {"{{ d.nope.x }}", kData},
    {"{{ d.items is callable }}{{ s.strip is callable }}", kData},
    {"{{ s[0] }}{{ s[-1] }}{{ s[1:4] }}{{ s[::-1] }}{{ s[::2] }}{{ s[-5:] }}{{ items[1:] }}{{ items[:-1] }}{{ items[::-1] }}", kData},
    {"{{ u[0] }}|{{ u[-1] }}|{{ u[2:7] }}|{{ u[::-1] }}|{{ u|length }}", kData},
    {"{{ items[5:1] }}{{ items[1:100] }}{{ items[-100:2] }}{{ s[10:2:-2] }}{{ (1, 2, 3)[1:] }}", kData},
    // string methods
    {"{{ '  a b  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n a'.lstrip() }}|{{ 'a \\n'.rstrip() }}|{{ 'a'.rstrip('\\n') }}"},
    {"{{ 'a,b,,c'.split(',') }}{{ '  a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a b c'.rsplit(' ', 1) }}"
     "{{ '  a  b  c  '.split(none, 1) }}{{ 'a<think>b</think>c'.split('</think>')[-1] }}"},
    {"{{ s.startswith('Hell') }}{{ s.endswith('World') }}{{ s.startswith(('x', 'H')) }}{{ s.upper() }}{{ s.lower() }}"
     "{{ 'hello wORLD'.title() }}{{ 'hELLO'.capitalize() }}{{ s.replace('l', 'L') }}{{ s.replace('l', 'L', 1) }}", kData},
    {"{{ s.find('o') }}{{ s.rfind('o') }}{{ s.find('zz') }}{{ s.count('l') }}{{ ', '.join(['a', 'b']) }}"
     "{{ u.find('日') }}{{ 'a1'.isalnum() }}{{ '12'.isdigit() }}{{ ' '.isspace() }}{{ 'ab'.islower() }}", kData},
    {"{{ 'x{}y{}'.format(1, 'b') }}{{ '{0}{name}{0!r}'.format('q', name='n') }}{{ '{{}}'.format() }}"},
    {"{{ 'line1\\nline2\\r\\nline3'.splitlines() }}"},
    // dict methods
    {"{{ d.items()|list }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.get('b') }}{{ d.get('x') }}{{ d.get('x', 5) }}", kData},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", kData},
    // filters
    {"{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ s|length }}|{{ items|count }}|{{ d|length }}|{{ missing|length }}", kData},
    {"{{ s|lower }}{{ s|upper }}{{ 'hello world-foo(bar'|title }}{{ 'hELLO wORLD'|capitalize }}{{ 42|string }}{{ [1]|string }}", kData},
    {"{{ items|first }}{{ items|last }}{{ []|first }}|{{ s|first }}{{ s|last }}{{ d|first }}", kData},
    {"{{ items|join(', ') }}|{{ items|join }}|{{ msgs|join(',', attribute='role') }}", kData},
    {"{{ missing|default('d') }}{{ ''|default('e', true) }}{{ none|default('f') }}{{ 0|d(5) }}{{ missing|default }}"},
    {"{{ d|items|list }}{{ missing|items|list }}{{ s|list }}{{ d|list }}{{ items|list }}", kData},
    {"{{ s|replace('o', '0') }}{{ s|replace('l', '', 2) }}{{ 'abc'|reverse }}{{ items|reverse|list }}", kData},
    {"{{ items|sort }}{{ words|sort }}{{ words|sort(case_sensitive=true) }}{{ words|sort(reverse=true) }}"
     "{{ msgs|sort(attribute='role')|map(attribute='content')|list }}", kData},
    {"{{ [1, 2, 2, 1]|unique|list }}{{ ['a', 'A', 'b']|unique|list }}{{ items|sum }}{{ items|max }}{{ items|min }}"
     "{{ words|max }}{{ [1.5, 2]|sum(start=1) }}", kData},
    {"{{ msgs|map(attribute='role')|list }}{{ words|map('upper')|list }}{{ msgs|map(attribute='x', default='-')|list }}", kData},
    {"{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}"
     "{{ msgs|rejectattr('role', 'eq', 'user')|list|length }}{{ [0, 1, 2, none]|select|list }}"
     "{{ [1, 2, 3, 4]|select('even')|list }}{{ [1, 2, 3, 4]|reject('odd')|list }}"
     "{{ msgs|selectattr('content')|list|length }}{{ [1, 5, 9]|select('gt', 4)|list }}", kData},
    {"{{ d|tojson }}|{{ msgs[0]|tojson }}|{{ u|tojson }}|{{ q|tojson }}|{{ [1, 'a', none, true, 2.0]|tojson }}", kData},
    {"{{ d|tojson(indent=2) }}|{{ d|tojson(indent=4, sort_keys=true) }}|{{ []|tojson(indent=2) }}|{{ {}|tojson(indent=2) }}", kData},
    {"{{ u|tojson(ensure_ascii=true) }}{{ d|tojson(separators=(',', ':')) }}{{ 'a<b>&\\'c'|tojson }}", kData},
    {"{{ missing|tojson }}"},
    {"{{ 1.5|int }}{{ '12'|int }}{{ 'x'|int }}{{ '42.7'|int }}{{ ' 0x1F '|int(base=16) }}{{ '1_000'|int }}{{ '1.5'|float }}"
     "{{ 'x'|float }}{{ 3|float }}{{ none|int(7) }}"},
    {"{{ -3|abs }}{{ -2.5|abs }}{{ 3.14159|round(2) }}{{ 2.5|round }}{{ 3.5|round }}{{ 2.675|round(2) }}{{ 3|round }}"
     "{{ 42.55|round(1, 'floor') }}{{ 42.51|round(0, 'ceil') }}"},
    {"{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('>', blank=true) }}"},
    {"{{ '<a href=\"x\">&\\'</a>'|e }}{{ 'x'|safe }}{{ 'one two  three'|wordcount }}{{ 'ab'|center(6) }}|"},
    {"{{ d|dictsort }}{{ {'b': 2, 'A': 1, 'a': 3}|dictsort }}{{ {'b': 2, 'a': 3}|dictsort(by='value', reverse=true) }}", kData},
    {"{{ '%s and %s'|format('x', 5) }}{{ s|attr('upper') is callable }}{{ d|attr('b') }}", kData},
    {"{{ x|nofilter }}"},
    {"{% if false %}{{ x|nofilter }}{{ x is notest }}{% endif %}ok"},
    {"{{ 5 is notest }}"},
    // statements: if, for, set, namespace, macros
    {"{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}{% if missing %}x{% elif z %}y{% else %}z{% endif %}", kData},
    {"{% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}"
     "{{ loop.last }}{{ loop.length }}{{ loop.cycle('a', 'b') }}{{ loop.previtem.role if not loop.first }}"
     "{{ loop.nextitem.role if not loop.last }};{% endfor %}",
     kData},
    {"{% for x in items if x > 1 %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% else %}none{% endfor %}"
     "{% for x in [] %}a{% else %}empty{% endfor %}{% for x in missing %}a{% else %}undef{% endfor %}", kData},
    {"{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}{% for (a, b) in [(5, 6)] %}{{ a + b }}{% endfor %}"
     "{% for c in 'héllo' %}{{ c }}.{% endfor %}"},
    {"{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"},
    {"{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{{ x }}{% endfor %}[{{ x }}]"},
    {"{% set x = 5 %}{% for i in [1, 2] %}{% if i == 2 %}{% set x = 9 %}{% endif %}[{{ x }}]{% endfor %}[{{ x }}]"},
    {"{% if true %}{% set y = 3 %}{% endif %}{{ y }}{% set i = 7 %}{% for i in [1, 2] %}{{ i }}{% endfor %}{{ i }}"},
    {"{% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }}|{% endfor %}"},
    {"{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns }}"},
    {"{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}|{{ ns.me.me.a }}|{{ [ns] }}|{{ ns == ns.me }}"},
    {"{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = [1, 2] %}{{ c }}{% set t = 1, %}{{ t }}"},
    {"{% set block %}in {{ s }} block{% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}", kData},
    {"{% filter upper %}hello {{ s }}{% endfilter %}", kData},
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }}{{ greet('Al', '?') }}"
     "{{ greet(punct='.', name='Cy') }}[{{ greet() }}]"},
    {"{% macro outer(x) %}<{{ x }}{{ s }}>{% endmacro %}{% set s = 'late' %}{{ outer(1) }}{{ outer(2)|upper }}"},
    {"{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"},
    {"{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b='x') }}{{ namespace(a=1).a }}"},
    {"{{ raise_exception('Conversation roles must alternate') }}"},
    {"{% generation %}{% set hidden = 1 %}gen {{ s }}{% endgeneration %}[{{ hidden }}]", kData},
    {"{{ strftime_now('') }}"},
    {"{% raw %}{{ not a tag }}{% if %}{% endraw %}"},
    {"{{ messages[0].content }}"},
    {"{{ [1, 2].append(3) }}"},
    // whitespace control and comments
    {"a {# note #} b\n{#- trimmed -#}\n c {#+ kept +#}\n d"},
    {"<{%- if true -%}  x  {%- endif -%}>\n<{{- ' y ' -}}>\n  {{+ 'z' }}  \n"},
    {"  {% if true %}\n  yes\n  {% endif %}\n  {%+ if true %}kept{% endif %}\n\t{% set a = 1 +%}\nafter\n"},
    {"{% for m in msgs %}\n  {{ m.role }}\n{% endfor %}\n{% if t %}\n    indented {{ n }}\n{% endif %}", kData},
    {"line\r\nwindows\rmac{% if true %}\r\nx{% endif %}\n\n"},
    {"{{ {'a': {'b': 1}} }}{{ {'a': {'b': {'c': 2}}}['a'] }}"},
};

// Snippets that depend on the environment flags, rendered under all four trim/lstrip settings.
const std::vector<Snippet> kWhitespaceSnippets = {
    {"  {% if true %}\n  yes\n  {% endif %}\n{# c #}\n  {#- c #}\n x {% if true -%}\n\n y{%- endif %}\n"},
    {"{% for m in msgs %}\n    {{ m.role }}: {{ m.content }}\n{% endfor %}\n", kData},
    {"a\n  {%+ if true %}b{% endif +%}\nc\n\t {% raw %} r {% endraw %}\n  {%- raw %}r2\n  {% endraw -%}  \nend"},
};

std::vector<ReferenceCase> make_cases(std::vector<std::string>* labels) {
  std::vector<ReferenceCase> cases;
  for (size_t i = 0; i < kSnippets.size(); ++i) {
    cases.push_back({kSnippets[i].source, nlohmann::json::parse(kSnippets[i].context), {}, std::nullopt});
    labels->push_back("snippet " + std::to_string(i));
  }
  for (size_t i = 0; i < kWhitespaceSnippets.size(); ++i) {
    for (int flags = 0; flags < 8; ++flags) {
      TemplateOptions options;
      options.trim_blocks = flags & 1;
      options.lstrip_blocks = flags & 2;
      options.keep_trailing_newline = flags & 4;
      const Snippet& snippet = kWhitespaceSnippets[i];
      cases.push_back({snippet.source, nlohmann::json::parse(snippet.context), options, std::nullopt});
      labels->push_back("whitespace snippet " + std::to_string(i) + " flags " + std::to_string(flags));
    }
  }
  return cases;
}

TEST(JinjaConformance, SnippetsMatchPythonJinja2) {
  std::vector<std::string> labels;
  const std::vector<ReferenceCase> cases = make_cases(&labels);
  std::string why;
  const auto expected = testing_util::render_with_jinja2(cases, &why);
  if (!expected) GTEST_SKIP() << why;
  ASSERT_EQ(expected->size(), cases.size());
  const int n_text = testing_util::expect_same_as_jinja2(cases, *expected, labels);
  std::cout << "[ chat     ] " << cases.size() << " snippets: " << n_text << " rendered identically, "
            << cases.size() - static_cast<size_t>(n_text) << " failed in both engines\n";
}

}  // namespace
}  // namespace leoam::chat
