#include "chat/template_methods.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

#include "chat/python_text.h"
#include "chat/template_access.h"

namespace leoam::chat {

namespace {

using Method = Result<Value> (*)(const Value& self, const CallArgs& args);

// A str argument that may be absent or None (nullopt), else must be a str.
Result<std::optional<std::string_view>> optional_string(const Value& v, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string_view>{};
  if (!v.is_string()) return type_error(std::string(what) + " must be str or None, not " + type_name(v));
  return std::optional<std::string_view>{v.as_string()};
}

Result<int64_t> optional_int(const Value& v, int64_t absent, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return absent;
  if (!v.is_integral()) return type_error(std::string(what) + " must be an integer, not " + type_name(v));
  return v.as_int();
}

Result<std::string_view> required_string(const Value& v, std::string_view what) {
  if (!v.is_string()) return type_error(std::string(what) + " must be str, not " + type_name(v));
  return std::string_view(v.as_string());
}

Value strings_to_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

// self[start:end] for the optional start/end of startswith, find, count...
Result<Value> window(const Value& self, const Value& start, const Value& end) {
  if (start.is_undefined() && end.is_undefined()) return self;
  return get_slice(self, start.is_undefined() ? nullptr : &start, end.is_undefined() ? nullptr : &end, nullptr);
}

template <bool kAtEnd>
Result<Value> str_affix(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, kAtEnd ? "endswith" : "startswith", {"affix", "start", "end"}, 1));
  LEOAM_ASSIGN_OR_RETURN(Value text, window(self, a[1], a[2]));
  if (!text.is_string()) return Value::boolean(false);
  const std::string& s = text.as_string();
  auto matches = [&](const Value& affix) -> Result<bool> {
    LEOAM_ASSIGN_OR_RETURN(std::string_view x, required_string(affix, "affix"));
    return kAtEnd ? std::string_view(s).ends_with(x) : std::string_view(s).starts_with(x);
  };
  if (a[0].is_list() && a[0].as_list().is_tuple) {
    for (const Value& affix : a[0].as_list().items) {
      LEOAM_ASSIGN_OR_RETURN(bool hit, matches(affix));
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  LEOAM_ASSIGN_OR_RETURN(bool hit, matches(a[0]));
  return Value::boolean(hit);
}

template <bool kLeft, bool kRight>
Result<Value> str_strip(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "strip", {"chars"}));
  LEOAM_ASSIGN_OR_RETURN(auto chars, optional_string(a[0], "strip arg"));
  return Value::string(std::string(py::strip(self.as_string(), chars, kLeft, kRight)));
}

template <bool kFromRight>
Result<Value> str_split(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, kFromRight ? "rsplit" : "split", {"sep", "maxsplit"}));
  LEOAM_ASSIGN_OR_RETURN(auto sep, optional_string(a[0], "sep"));
  LEOAM_ASSIGN_OR_RETURN(int64_t max_split, optional_int(a[1], -1, "maxsplit"));
  if (sep && sep->empty()) return invalid_argument("ValueError: empty separator");
  return strings_to_list(py::split(self.as_string(), sep, max_split, kFromRight));
}

Result<Value> str_splitlines(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "splitlines", {"keepends"}));
  if (is_truthy(a[0])) return invalid_argument("splitlines(keepends=True) is not supported");
  return strings_to_list(py::split_lines(self.as_string()));
}

template <std::string (*kFn)(std::string_view)>
Result<Value> str_convert(const Value& self, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "str method", {}).status());
  return Value::string(kFn(self.as_string()));
}

Result<Value> str_replace(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "replace", {"old", "new", "count"}, 2));
  LEOAM_ASSIGN_OR_RETURN(std::string_view old_text, required_string(a[0], "replace() argument 1"));
  LEOAM_ASSIGN_OR_RETURN(std::string_view new_text, required_string(a[1], "replace() argument 2"));
  LEOAM_ASSIGN_OR_RETURN(int64_t count, optional_int(a[2], -1, "count"));
  return Value::string(py::replace(self.as_string(), old_text, new_text, count));
}

// find / rfind / index / rindex: the code point index of sub, -1 (or an error for index) if absent.
template <bool kFromRight, bool kRaise>
Result<Value> str_find(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "find", {"sub", "start", "end"}, 1));
  LEOAM_ASSIGN_OR_RETURN(std::string_view sub, required_string(a[0], "find() argument"));
  LEOAM_ASSIGN_OR_RETURN(Value text, window(self, a[1], a[2]));
  if (!text.is_string()) return Value::integer(-1);
  const std::string& s = text.as_string();
  const size_t at = kFromRight ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) {
    if (kRaise) return invalid_argument("ValueError: substring not found");
    return Value::integer(-1);
  }
  LEOAM_ASSIGN_OR_RETURN(int64_t offset, optional_int(a[1], 0, "start"));
  if (offset < 0) offset = std::max<int64_t>(0, offset + static_cast<int64_t>(py::count_code_points(self.as_string())));
  return Value::integer(offset + static_cast<int64_t>(py::count_code_points(std::string_view(s).substr(0, at))));
}

Result<Value> str_count(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "count", {"sub", "start", "end"}, 1));
  LEOAM_ASSIGN_OR_RETURN(std::string_view sub, required_string(a[0], "count() argument"));
  LEOAM_ASSIGN_OR_RETURN(Value text, window(self, a[1], a[2]));
  return Value::integer(text.is_string() ? py::count_occurrences(text.as_string(), sub) : 0);
}

Result<Value> str_join(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "join", {"iterable"}, 1));
  LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return type_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) +
                        " found");
    }
    if (i > 0) out += self.as_string();
    out += items[i].as_string();
  }
  return Value::string(std::move(out));
}

Result<Value> str_format(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(std::string out, brace_format(self.as_string(), args));
  return Value::string(std::move(out));
}

template <bool (*kPredicate)(std::string_view)>
Result<Value> str_is(const Value& self, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "str test", {}).status());
  return Value::boolean(kPredicate(self.as_string()));
}

struct NamedMethod {
  std::string_view name;
  Method fn;
};

constexpr std::array<NamedMethod, 28> kStrMethods = {{
    {"startswith", str_affix<false>},
    {"endswith", str_affix<true>},
    {"strip", str_strip<true, true>},
    {"lstrip", str_strip<true, false>},
    {"rstrip", str_strip<false, true>},
    {"split", str_split<false>},
    {"rsplit", str_split<true>},
    {"splitlines", str_splitlines},
    {"upper", str_convert<py::to_upper>},
    {"lower", str_convert<py::to_lower>},
    {"title", str_convert<py::title>},
    {"capitalize", str_convert<py::capitalize>},
    {"replace", str_replace},
    {"find", str_find<false, false>},
    {"rfind", str_find<true, false>},
    {"index", str_find<false, true>},
    {"rindex", str_find<true, true>},
    {"count", str_count},
    {"join", str_join},
    {"format", str_format},
    {"isdigit", str_is<py::is_digit_text>},
    {"isnumeric", str_is<py::is_digit_text>},
    {"isdecimal", str_is<py::is_digit_text>},
    {"isalpha", str_is<py::is_alpha_text>},
    {"isalnum", str_is<py::is_alnum_text>},
    {"isspace", str_is<py::is_space_text>},
    {"islower", str_is<py::is_lower_text>},
    {"isupper", str_is<py::is_upper_text>},
}};

Result<Value> dict_items(const Value& self, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "items", {}).status());
  std::vector<Value> items;
  for (const auto& [k, v] : self.as_dict().entries) items.push_back(Value::list({Value::string(k), v}, true));
  return Value::list(std::move(items));
}

Result<Value> dict_keys(const Value& self, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "keys", {}).status());
  return Value::list(iterate(self).value());
}

Result<Value> dict_values(const Value& self, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "values", {}).status());
  std::vector<Value> values;
  for (const auto& entry : self.as_dict().entries) values.push_back(entry.second);
  return Value::list(std::move(values));
}

Result<Value> dict_get(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "get", {"key", "default"}, 1));
  if (a[0].is_string()) {
    if (const Value* v = self.as_dict().find(a[0].as_string())) return *v;
  }
  return a[1].is_undefined() ? Value::none() : a[1];
}

Result<Value> same_object(const Value& self, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "copy", {}).status());
  return self;  // containers are immutable, so a copy may share
}

constexpr std::array<NamedMethod, 5> kDictMethods = {{
    {"items", dict_items}, {"keys", dict_keys}, {"values", dict_values}, {"get", dict_get}, {"copy", same_object},
}};

Result<Value> list_count(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "count", {"value"}, 1));
  const auto& items = self.as_list().items;
  const auto equal = [&](const Value& v) { return values_equal(v, a[0]); };
  return Value::integer(std::count_if(items.begin(), items.end(), equal));
}

Result<Value> list_index(const Value& self, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "index", {"value"}, 1));
  const auto& items = self.as_list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (values_equal(items[i], a[0])) return Value::integer(static_cast<int64_t>(i));
  }
  return invalid_argument("ValueError: " + python_repr(a[0]) + " is not in list");
}

constexpr std::array<NamedMethod, 3> kListMethods = {{
    {"count", list_count}, {"index", list_index}, {"copy", same_object},
}};

constexpr std::array<std::string_view, 8> kDictMutators = {"clear", "pop", "popitem", "setdefault", "update",
                                                           "fromkeys", "__setitem__", "__delitem__"};
constexpr std::array<std::string_view, 8> kListMutators = {"append", "clear", "extend", "insert",
                                                           "pop",    "remove", "reverse", "sort"};

template <size_t N>
std::optional<Value> bind_method(const std::array<NamedMethod, N>& table, const Value& obj, std::string_view name) {
  for (const NamedMethod& m : table) {
    if (m.name != name) continue;
    Method fn = m.fn;
    return Value::function(std::string(name), [obj, fn](const CallArgs& args) { return fn(obj, args); });
  }
  return std::nullopt;
}

template <size_t N>
std::optional<Value> refuse_mutator(const std::array<std::string_view, N>& names, const Value& obj,
                                    std::string_view name) {
  if (std::find(names.begin(), names.end(), name) == names.end()) return std::nullopt;
  std::string message = "access to '" + std::string(name) + "' of a '" + type_name(obj) +
                        "' is unsafe: templates cannot modify their inputs";
  return Value::function(std::string(name), [message](const CallArgs&) -> Result<Value> {
    return invalid_argument(message);
  });
}

// One %-conversion of percent_format.
Result<std::string> convert_percent(const std::string& spec, char conversion, const Value& arg) {
  char buf[512];
  switch (conversion) {
    case 's':
    case 'r': {
      const std::string text = conversion == 's' ? python_str(arg) : python_repr(arg);
      std::snprintf(buf, sizeof(buf), ("%" + spec + "s").c_str(), text.c_str());
      return spec.empty() ? text : std::string(buf);
    }
    case 'd':
    case 'i':
    case 'x':
    case 'X':
    case 'o': {
      if (!arg.is_number()) return type_error(std::string("%") + conversion + " format: a number is required");
      const auto i = static_cast<long long>(arg.is_float() ? static_cast<int64_t>(arg.as_double()) : arg.as_int());
      std::snprintf(buf, sizeof(buf), ("%" + spec + "ll" + (conversion == 'i' ? 'd' : conversion)).c_str(), i);
      return std::string(buf);
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
      if (!arg.is_number()) return type_error(std::string("must be real number, not ") + type_name(arg));
      std::snprintf(buf, sizeof(buf), ("%" + spec + conversion).c_str(), arg.as_double());
      return std::string(buf);
    default:
      return invalid_argument(std::string("ValueError: unsupported format character '") + conversion + "'");
  }
}

}  // namespace

std::optional<Value> find_method(const Value& obj, std::string_view name) {
  if (obj.is_string()) return bind_method(kStrMethods, obj, name);
  if (obj.is_dict() && !obj.is_namespace()) {
    if (auto m = bind_method(kDictMethods, obj, name)) return m;
    return refuse_mutator(kDictMutators, obj, name);
  }
  if (obj.is_list() && !obj.as_list().is_tuple) {
    if (auto m = bind_method(kListMethods, obj, name)) return m;
    return refuse_mutator(kListMutators, obj, name);
  }
  if (obj.is_list()) return bind_method(kListMethods, obj, name);
  return std::nullopt;
}

Result<std::string> percent_format(std::string_view fmt, const Value& args) {
  std::vector<Value> values;
  if (args.is_list() && args.as_list().is_tuple) {
    values = args.as_list().items;
  } else {
    values.push_back(args);
  }
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    while (j < fmt.size() && std::string_view("-+ #0123456789.").find(fmt[j]) != std::string_view::npos) ++j;
    if (j >= fmt.size()) return invalid_argument("ValueError: incomplete format");
    if (fmt[j] == '%') {
      out += '%';
      i = j;
      continue;
    }
    if (next >= values.size()) return type_error("not enough arguments for format string");
    LEOAM_ASSIGN_OR_RETURN(std::string piece, convert_percent(std::string(fmt.substr(i + 1, j - i - 1)), fmt[j],
                                                              values[next++]));
    out += piece;
    i = j;
  }
  if (next < values.size()) return type_error("not all arguments converted during string formatting");
  return out;
}

Result<std::string> brace_format(std::string_view fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else return invalid_argument("ValueError: Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) return invalid_argument("ValueError: Single '{' encountered in format string");
    std::string_view field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 's' && field[bang + 1] != 'r')) {
        return invalid_argument("format field {" + std::string(field) + "} is not supported");
      }
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    if (field.find(':') != std::string_view::npos) {
      return invalid_argument("format specs ({" + std::string(field) + "}) are not supported");
    }
    const Value* arg = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t index = field.empty() ? auto_index++ : static_cast<size_t>(std::stoul(std::string(field)));
      if (index >= args.positional.size()) {
        return invalid_argument("IndexError: Replacement index " + std::to_string(index) + " out of range");
      }
      arg = &args.positional[index];
    } else {
      for (const auto& [key, value] : args.keyword) {
        if (key == field) arg = &value;
      }
      if (!arg) return invalid_argument("KeyError: '" + std::string(field) + "'");
    }
    out += conversion == 'r' ? python_repr(*arg) : python_str(*arg);
  }
  return out;
}

}  // namespace leoam::chat
