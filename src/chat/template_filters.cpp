#include "chat/template_filters.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "chat/python_text.h"
#include "chat/template_access.h"
#include "chat/template_json.h"
#include "chat/template_methods.h"
#include "chat/template_operators.h"
#include "chat/template_tests.h"

namespace leoam::chat {

namespace {

using FilterFn = Result<Value> (*)(const Value& input, const CallArgs& args);

Value str_value(std::string s) { return Value::string(std::move(s)); }

// ---- attribute paths ("a.b.0", and "x,y" lists for sort) ----

// Jinja2's make_attrgetter: each dotted part is an item lookup, digits as integers.
Result<Value> lookup_path(const Value& item, const Value& attribute) {
  if (attribute.is_undefined() || attribute.is_none()) return item;
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  for (const std::string& part : py::split(attribute.as_string(), std::string_view("."), -1, false)) {
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    LEOAM_ASSIGN_OR_RETURN(v, get_item(v, digits ? Value::integer(std::stoll(part)) : Value::string(part)));
  }
  return v;
}

Value ignore_case(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? str_value(py::to_lower(v.as_string())) : v;
}

// The sort key of make_multi_attrgetter: a list of each comma-separated attribute's value.
Result<Value> sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const std::string& a : py::split(attribute.as_string(), std::string_view(","), -1, false)) {
      LEOAM_ASSIGN_OR_RETURN(Value v, lookup_path(item, str_value(a)));
      parts.push_back(ignore_case(v, case_sensitive));
    }
  } else {
    LEOAM_ASSIGN_OR_RETURN(Value v, lookup_path(item, attribute));
    parts.push_back(ignore_case(v, case_sensitive));
  }
  return Value::list(std::move(parts));
}

// A stable sort of items by keys; errors from comparing are returned.
Result<std::vector<Value>> sorted_by(std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status failure = Status::ok();
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!failure.is_ok()) return false;
    auto c = reverse ? compare_values(keys[b], keys[a], "<") : compare_values(keys[a], keys[b], "<");
    if (!c.is_ok()) {
      failure = c.status();
      return false;
    }
    return *c < 0;
  });
  if (!failure.is_ok()) return failure;
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

bool flag(const Value& v) { return is_truthy(v); }

// ---- filters ----

Result<Value> f_abs(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "abs", {}).status());
  if (input.is_float()) return Value::number(std::fabs(input.as_double()));
  if (input.is_integral() && input.as_int() < 0) return unary_op("-", input);
  if (input.is_integral()) return Value::integer(input.as_int());
  return type_error("bad operand type for abs(): '" + type_name(input) + "'");
}

Result<Value> f_attr(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "attr", {"name"}, 1));
  if (input.is_undefined()) return undefined_error(input);
  const std::string name = python_str(a[0]);
  if (input.is_namespace()) return get_attribute(input, name);
  if (std::optional<Value> method = find_method(input, name)) return *method;
  return Value::undefined("'" + type_name(input) + " object' has no attribute '" + name + "'");
}

template <std::string (*kFn)(std::string_view)>
Result<Value> f_text(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "filter", {}).status());
  return str_value(kFn(python_str(input)));
}

std::string identity_text(std::string_view s) { return std::string(s); }

// Jinja2's title: words start after whitespace and any of - ( { [ <.
std::string jinja_title(std::string_view s) {
  std::string out(s);
  bool word_start = true;
  for (char& c : out) {
    const bool separator = py::is_space(static_cast<unsigned char>(c)) || c == '-' || c == '(' || c == '{' ||
                           c == '[' || c == '<';
    if (separator) {
      word_start = true;
    } else {
      c = word_start ? py::to_upper(std::string_view(&c, 1))[0] : py::to_lower(std::string_view(&c, 1))[0];
      word_start = false;
    }
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Result<Value> f_center(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "center", {"width"}));
  const int64_t width = a[0].is_undefined() ? 80 : a[0].as_int();
  const std::string s = python_str(input);
  const auto n = static_cast<int64_t>(py::count_code_points(s));
  if (n >= width) return str_value(s);
  const int64_t margin = width - n;
  const int64_t left = margin / 2 + (margin & width & 1);
  return str_value(std::string(static_cast<size_t>(left), ' ') + s +
                   std::string(static_cast<size_t>(margin - left), ' '));
}

Result<Value> f_length(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "length", {}).status());
  LEOAM_ASSIGN_OR_RETURN(int64_t n, length_of(input));
  return Value::integer(n);
}

Result<Value> f_default(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "default", {"default_value", "boolean"}));
  if (input.is_undefined() || (flag(a[1]) && !is_truthy(input))) {
    return a[0].is_undefined() ? str_value("") : a[0];
  }
  return input;
}

Result<Value> f_dictsort(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "dictsort", {"case_sensitive", "by", "reverse"}));
  if (input.is_undefined()) return undefined_error(input);
  if (!input.is_dict() || input.is_namespace()) return type_error("dictsort needs a mapping, not " + type_name(input));
  const std::string by = a[1].is_undefined() ? "key" : python_str(a[1]);
  if (by != "key" && by != "value") {
    return invalid_argument("dictsort: you can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> items;
  std::vector<Value> keys;
  for (const auto& [k, v] : input.as_dict().entries) {
    items.push_back(Value::list({str_value(k), v}, true));
    keys.push_back(ignore_case(by == "key" ? str_value(k) : v, flag(a[0])));
  }
  LEOAM_ASSIGN_OR_RETURN(items, sorted_by(std::move(items), keys, flag(a[2])));
  return Value::list(std::move(items));
}

Result<Value> f_escape(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "escape", {}).status());
  return str_value(html_escape(python_str(input)));
}

Result<Value> f_first(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "first", {}).status());
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> f_last(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "last", {}).status());
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python's float(str): surrounding whitespace, a sign, digits with '_', inf and nan.
std::optional<double> parse_python_float(std::string_view text) {
  std::string s;
  for (char c : py::strip(text, std::nullopt, true, true)) {
    if (c != '_') s += c;
  }
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

Result<Value> f_float(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "float", {"default"}));
  if (input.is_number()) return Value::number(input.as_double());
  if (input.is_string()) {
    if (auto d = parse_python_float(input.as_string())) return Value::number(*d);
  }
  return a[0].is_undefined() ? Value::number(0.0) : a[0];
}

// Python's int(str, base): whitespace, a sign, digits with single '_' between them, a prefix
// matching the base (or any prefix with base 0).
std::optional<int64_t> parse_python_int(std::string_view text, int base) {
  std::string_view s = py::strip(text, std::nullopt, true, true);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.size() > 1 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    const int prefixed = p == 'x' ? 16 : (p == 'o' ? 8 : (p == 'b' ? 2 : 0));
    if (prefixed != 0 && (base == 0 || base == prefixed)) {
      base = prefixed;
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (base == 0) base = 10;
  if (s.empty() || s.front() == '_' || s.back() == '_' || s.find("__") != std::string_view::npos) return std::nullopt;
  std::string digits;
  for (char c : s) {
    if (c != '_') digits += c;
  }
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || end != digits.c_str() + digits.size() || digits[0] == '-' || digits[0] == '+') return std::nullopt;
  return negative ? -v : v;
}

Result<Value> f_int(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "int", {"default", "base"}));
  const Value fallback = a[0].is_undefined() ? Value::integer(0) : a[0];
  if (input.is_integral()) return Value::integer(input.as_int());
  std::optional<double> d;
  if (input.is_float()) d = input.as_double();
  if (input.is_string()) {
    const int base = a[1].is_undefined() ? 10 : static_cast<int>(a[1].as_int());
    if (auto i = parse_python_int(input.as_string(), base)) return Value::integer(*i);
    d = parse_python_float(input.as_string());  // Jinja2's quirk: "42.23"|int is 42
  }
  if (!d || !std::isfinite(*d) || std::fabs(*d) >= 9.2e18) return fallback;
  return Value::integer(static_cast<int64_t>(std::trunc(*d)));
}

Result<Value> f_format(const Value& input, const CallArgs& args) {
  if (!args.keyword.empty()) return invalid_argument("the format filter takes positional arguments only here");
  LEOAM_ASSIGN_OR_RETURN(std::string s, percent_format(python_str(input), Value::list(args.positional, true)));
  return str_value(std::move(s));
}

Result<Value> f_indent(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "indent", {"width", "first", "blank"}));
  if (!input.is_string()) return type_error("indent needs a str, not " + type_name(input));
  std::string indention;
  if (a[0].is_string()) {
    indention = a[0].as_string();
  } else {
    const int64_t width = a[0].is_undefined() ? 4 : a[0].as_int();
    indention.assign(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  }
  const std::vector<std::string> lines = py::split_lines(input.as_string() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if (i > 0 && (flag(a[2]) || !lines[i].empty())) out += indention;
    out += lines[i];
  }
  if (flag(a[1])) out = indention + out;
  return str_value(std::move(out));
}

Result<Value> f_items(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "items", {}).status());
  if (input.is_undefined()) return Value::list({});
  if (!input.is_dict() || input.is_namespace()) return type_error("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, v] : input.as_dict().entries) items.push_back(Value::list({str_value(k), v}, true));
  return Value::list(std::move(items));
}

Result<Value> f_join(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "join", {"d", "attribute"}));
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  const std::string separator = python_str(a[0]);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    LEOAM_ASSIGN_OR_RETURN(Value v, lookup_path(items[i], a[1]));
    append_str(out, v);
  }
  return str_value(std::move(out));
}

Result<Value> f_list(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "list", {}).status());
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  return Value::list(std::move(items));
}

// map('filter', args...) or map(attribute='path', default=value).
Result<Value> f_map(const Value& input, const CallArgs& args) {
  if (!is_truthy(input)) return Value::list({});
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::vector<Value> out;
  out.reserve(items.size());
  if (args.positional.empty()) {
    LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "map", {"attribute", "default"}, 1));
    for (const Value& item : items) {
      LEOAM_ASSIGN_OR_RETURN(Value v, lookup_path(item, a[0]));
      out.push_back((v.is_undefined() && !a[1].is_undefined() && !a[1].is_none()) ? a[1] : v);
    }
    return Value::list(std::move(out));
  }
  const std::string name = python_str(args.positional[0]);
  CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  for (const Value& item : items) {
    LEOAM_ASSIGN_OR_RETURN(Value v, apply_filter(name, item, rest));
    out.push_back(std::move(v));
  }
  return Value::list(std::move(out));
}

// select / reject / selectattr / rejectattr.
template <bool kSelect, bool kByAttribute>
Result<Value> f_select(const Value& input, const CallArgs& args) {
  if (!is_truthy(input)) return Value::list({});
  if (!args.keyword.empty()) return invalid_argument("select filters take positional arguments only here");
  size_t next = 0;
  Value attribute;
  if (kByAttribute) {
    if (args.positional.empty()) return invalid_argument("Missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) test = python_str(args.positional[next++]);
  const CallArgs test_args{{args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end()}, {}};
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::vector<Value> out;
  for (const Value& item : items) {
    LEOAM_ASSIGN_OR_RETURN(Value subject, lookup_path(item, attribute));
    bool pass = is_truthy(subject);
    if (test) {
      LEOAM_ASSIGN_OR_RETURN(pass, apply_test(*test, subject, test_args));
    }
    if (pass == kSelect) out.push_back(item);
  }
  return Value::list(std::move(out));
}

template <bool kMax>
Result<Value> f_min_max(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, kMax ? "max" : "min", {"case_sensitive", "attribute"}));
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  LEOAM_ASSIGN_OR_RETURN(Value best_key, lookup_path(items[0], a[1]));
  best_key = ignore_case(best_key, flag(a[0]));
  for (size_t i = 1; i < items.size(); ++i) {
    LEOAM_ASSIGN_OR_RETURN(Value key, lookup_path(items[i], a[1]));
    key = ignore_case(key, flag(a[0]));
    LEOAM_ASSIGN_OR_RETURN(int c, compare_values(key, best_key, kMax ? ">" : "<"));
    if (kMax ? c > 0 : c < 0) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Result<Value> f_replace(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "replace", {"old", "new", "count"}, 2));
  const int64_t count = (a[2].is_undefined() || a[2].is_none()) ? -1 : a[2].as_int();
  return str_value(py::replace(python_str(input), python_str(a[0]), python_str(a[1]), count));
}

Result<Value> f_reverse(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "reverse", {}).status());
  if (input.is_string()) {
    const Value step = Value::integer(-1);
    return get_slice(input, nullptr, nullptr, &step);
  }
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Result<Value> f_round(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "round", {"precision", "method"}));
  const int64_t precision = a[0].is_undefined() ? 0 : a[0].as_int();
  const std::string method = a[1].is_undefined() ? "common" : python_str(a[1]);
  if (!input.is_number()) return type_error("type " + type_name(input) + " doesn't define __round__ method");
  if (method == "common") {
    if (input.is_integral() && precision >= 0) return Value::integer(input.as_int());
    // Python rounds the exact binary value half to even, as printf does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)),
                  input.as_double());
    double r = std::strtod(buf, nullptr);
    if (precision < 0) {
      const double scale = std::pow(10.0, static_cast<double>(-precision));
      r = std::nearbyint(input.as_double() / scale) * scale;
    }
    return Value::number(r);
  }
  if (method != "ceil" && method != "floor") return invalid_argument("round: method must be common, ceil or floor");
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = input.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Result<Value> f_sort(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "sort", {"reverse", "case_sensitive", "attribute"}));
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& item : items) {
    LEOAM_ASSIGN_OR_RETURN(Value key, sort_key(item, a[2], flag(a[1])));
    keys.push_back(std::move(key));
  }
  LEOAM_ASSIGN_OR_RETURN(items, sorted_by(std::move(items), keys, flag(a[0])));
  return Value::list(std::move(items));
}

Result<Value> f_sum(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "sum", {"attribute", "start"}));
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  Value total = a[1].is_undefined() ? Value::integer(0) : a[1];
  for (const Value& item : items) {
    LEOAM_ASSIGN_OR_RETURN(Value v, lookup_path(item, a[0]));
    LEOAM_ASSIGN_OR_RETURN(total, binary_op("+", total, v));
  }
  return total;
}

Result<Value> f_tojson(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions options;
  options.ensure_ascii = flag(a[0]);
  if (a[1].is_string()) {
    options.indent = a[1].as_string();
  } else if (a[1].is_integral()) {
    options.indent = std::string(static_cast<size_t>(std::max<int64_t>(a[1].as_int(), 0)), ' ');
  }
  if (a[2].is_list() && a[2].as_list().items.size() == 2) {
    options.item_separator = python_str(a[2].as_list().items[0]);
    options.key_separator = python_str(a[2].as_list().items[1]);
  }
  options.sort_keys = flag(a[3]);
  LEOAM_ASSIGN_OR_RETURN(std::string text, dump_json(input, options));
  return str_value(std::move(text));
}

Result<Value> f_trim(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "trim", {"chars"}));
  std::optional<std::string_view> chars;
  if (a[0].is_string()) chars = a[0].as_string();
  return str_value(std::string(py::strip(python_str(input), chars, true, true)));
}

Result<Value> f_unique(const Value& input, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "unique", {"case_sensitive", "attribute"}));
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::vector<Value> out;
  std::vector<Value> seen;
  for (const Value& item : items) {
    LEOAM_ASSIGN_OR_RETURN(Value key, lookup_path(item, a[1]));
    key = ignore_case(key, flag(a[0]));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) {
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Result<Value> f_wordcount(const Value& input, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "wordcount", {}).status());
  const std::string s = python_str(input);
  int64_t words = 0;
  bool in_word = false;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const uint32_t cp = py::decode_code_point(s, i, &n);
    const bool word_char = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
                           cp == '_' || (cp >= 0x80 && !py::is_space(cp));
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr std::array<NamedFilter, 42> kFilters = {{
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_text<py::capitalize>},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"forceescape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_text<py::to_lower>},
    {"map", f_map},
    {"max", f_min_max<true>},
    {"min", f_min_max<false>},
    {"reject", f_select<false, false>},
    {"rejectattr", f_select<false, true>},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_text<identity_text>},
    {"select", f_select<true, false>},
    {"selectattr", f_select<true, true>},
    {"sort", f_sort},
    {"string", f_text<identity_text>},
    {"sum", f_sum},
    {"title", f_text<jinja_title>},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_text<py::to_upper>},
    {"wordcount", f_wordcount},
}};

FilterFn find_filter(std::string_view name) {
  for (const NamedFilter& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

}  // namespace

bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }

Result<Value> apply_filter(std::string_view name, const Value& input, const CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) return invalid_argument("no filter named '" + std::string(name) + "'");
  return fn(input, args);
}

}  // namespace leoam::chat
