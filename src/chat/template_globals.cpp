#include "chat/template_globals.h"

#include <string>
#include <vector>

namespace leoam::chat {

namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox limit on range()

Result<Value> range(const CallArgs& args) {
  if (!args.keyword.empty()) return type_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) return type_error("range expected 1 to 3 arguments");
  for (const Value& v : p) {
    if (!v.is_integral()) return type_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
  }
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) return invalid_argument("ValueError: range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange) {
      return invalid_argument(
          "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

// dict(mapping, **kwargs) and namespace(mapping, **kwargs).
Result<Value> make_dict(const CallArgs& args, bool is_namespace) {
  DictData data;
  data.is_namespace = is_namespace;
  if (args.positional.size() > 1) return type_error("dict expected at most 1 argument");
  if (!args.positional.empty()) {
    const Value& m = args.positional[0];
    if (!m.is_dict() || m.is_namespace()) return type_error("cannot build a dict from a " + type_name(m));
    data.entries = m.as_dict().entries;
  }
  for (const auto& [k, v] : args.keyword) data.set(k, v);
  return Value::dict(std::move(data));
}

}  // namespace

std::optional<Value> find_global_function(std::string_view name, const std::tm& now) {
  if (name == "range") return Value::function("range", range);
  if (name == "dict") {
    return Value::function("dict", [](const CallArgs& args) { return make_dict(args, false); });
  }
  if (name == "namespace") {
    return Value::function("namespace", [](const CallArgs& args) { return make_dict(args, true); });
  }
  if (name == "raise_exception") {
    return Value::function("raise_exception", [](const CallArgs& args) -> Result<Value> {
      LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "raise_exception", {"message"}, 1));
      return invalid_argument(python_str(a[0]));
    });
  }
  if (name == "strftime_now") {
    return Value::function("strftime_now", [now](const CallArgs& args) -> Result<Value> {
      LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, "strftime_now", {"format"}, 1));
      if (!a[0].is_string()) return type_error("strftime_now() argument must be str, not " + type_name(a[0]));
      if (a[0].as_string().empty()) return Value::string("");
      std::vector<char> buf(256 + a[0].as_string().size() * 16);
      const size_t n = std::strftime(buf.data(), buf.size(), a[0].as_string().c_str(), &now);
      return Value::string(std::string(buf.data(), n));
    });
  }
  return std::nullopt;
}

}  // namespace leoam::chat
