#include "chat/template_value.h"

#include <algorithm>

#include "chat/python_text.h"

namespace leoam::chat {

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string reason) {
  return Value(ValueKind::kUndefined, std::make_shared<const std::string>(std::move(reason)));
}
Value Value::none() {
  // Not Value(kNone, std::monostate{}): GCC 12 at -O1 with ASan then warns that the temporary
  // variant may be used uninitialized (-Wmaybe-uninitialized, a false positive).
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}
Value Value::boolean(bool b) { return Value(ValueKind::kBool, b); }
Value Value::integer(int64_t i) { return Value(ValueKind::kInt, i); }
Value Value::number(double d) { return Value(ValueKind::kFloat, d); }
Value Value::string(std::string s) {
  return Value(ValueKind::kString, std::make_shared<const std::string>(std::move(s)));
}
Value Value::list(std::vector<Value> items, bool is_tuple) {
  return Value(ValueKind::kList, std::make_shared<const ListData>(ListData{std::move(items), is_tuple}));
}
Value Value::dict(DictData data) { return Value(ValueKind::kDict, std::make_shared<DictData>(std::move(data))); }
Value Value::function(std::string name, NativeFunction fn) {
  auto data = std::make_shared<const FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return Value(ValueKind::kFunction, std::move(data));
}

const std::string& Value::undefined_reason() const {
  static const std::string kNoReason = "value is undefined";
  const auto* p = std::get_if<std::shared_ptr<const std::string>>(&data_);
  return (p && !(*p)->empty()) ? **p : kNoReason;
}

const std::string& Value::function_name() const {
  return std::get<std::shared_ptr<const FunctionData>>(data_)->name;
}

Result<Value> Value::call(const CallArgs& args) const {
  return std::get<std::shared_ptr<const FunctionData>>(data_)->fn(args);
}

bool Value::same_object(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
      return values_equal(*this, other);
    default:
      return data_ == other.data_;  // the same shared object
  }
}

bool is_truthy(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return v.as_bool();
    case ValueKind::kInt:
      return v.as_int() != 0;
    case ValueKind::kFloat:
      return v.as_double() != 0.0;
    case ValueKind::kString:
      return !v.as_string().empty();
    case ValueKind::kList:
      return !v.as_list().items.empty();
    case ValueKind::kDict:
      return v.is_namespace() || !v.as_dict().entries.empty();
    case ValueKind::kFunction:
      return true;
  }
  return false;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.as_string() == b.as_string();
    case ValueKind::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.is_namespace || y.is_namespace) return a.same_object(b);
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

Result<int> compare_values(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    const double x = a.as_double();
    const double y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return compare_values(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return type_error("'" + std::string(op) + "' not supported between instances of '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "NoneType";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case ValueKind::kDict:
      return v.is_namespace() ? "Namespace" : "dict";
    case ValueKind::kFunction:
      return "function";
  }
  return "object";
}

namespace {

// Printing with the dicts being printed in `active`: a namespace that holds itself prints as
// {...} there, as Python's repr does.
using Active = std::vector<const DictData*>;

void append_printed(std::string& out, const Value& v, bool repr, Active& active);

void append_items_repr(std::string& out, const ListData& list, Active& active) {
  out += list.is_tuple ? '(' : '[';
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i > 0) out += ", ";
    append_printed(out, list.items[i], true, active);
  }
  if (list.is_tuple && list.items.size() == 1) out += ',';
  out += list.is_tuple ? ')' : ']';
}

void append_dict_repr(std::string& out, const DictData& dict, Active& active) {
  if (std::find(active.begin(), active.end(), &dict) != active.end()) {
    out += "{...}";
    return;
  }
  active.push_back(&dict);
  out += '{';
  for (size_t i = 0; i < dict.entries.size(); ++i) {
    if (i > 0) out += ", ";
    out += py::repr_string(dict.entries[i].first);
    out += ": ";
    append_printed(out, dict.entries[i].second, true, active);
  }
  out += '}';
  active.pop_back();
}

void append_printed(std::string& out, const Value& v, bool repr, Active& active) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      if (repr) out += "Undefined";
      return;
    case ValueKind::kNone:
      out += "None";
      return;
    case ValueKind::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case ValueKind::kInt:
      out += std::to_string(v.as_int());
      return;
    case ValueKind::kFloat:
      out += py::format_float(v.as_double());
      return;
    case ValueKind::kString:
      out += repr ? py::repr_string(v.as_string()) : v.as_string();
      return;
    case ValueKind::kList:
      append_items_repr(out, v.as_list(), active);
      return;
    case ValueKind::kDict:
      if (v.is_namespace()) out += "<Namespace ";
      append_dict_repr(out, v.as_dict(), active);
      if (v.is_namespace()) out += '>';
      return;
    case ValueKind::kFunction:
      out += "<function " + v.function_name() + ">";
      return;
  }
}

}  // namespace

void append_str(std::string& out, const Value& v) {
  if (v.is_string()) {
    out += v.as_string();
    return;
  }
  Active active;
  append_printed(out, v, false, active);
}

std::string python_str(const Value& v) {
  std::string out;
  append_str(out, v);
  return out;
}

std::string python_repr(const Value& v) {
  std::string out;
  Active active;
  append_printed(out, v, true, active);
  return out;
}

Result<std::vector<Value>> bind_args(const CallArgs& args, std::string_view function,
                                     std::initializer_list<std::string_view> params, size_t n_required) {
  const std::string fn(function);
  if (args.positional.size() > params.size()) {
    return type_error(fn + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
                      std::to_string(args.positional.size()) + " given)");
  }
  std::vector<Value> bound(params.size());
  std::vector<bool> given(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    bound[i] = args.positional[i];
    given[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) return type_error(fn + "() got an unexpected keyword argument '" + key + "'");
    const auto i = static_cast<size_t>(it - params.begin());
    if (given[i]) return type_error(fn + "() got multiple values for argument '" + key + "'");
    bound[i] = value;
    given[i] = true;
  }
  for (size_t i = 0; i < n_required; ++i) {
    if (!given[i]) {
      return type_error(fn + "() missing required argument '" + std::string(*(params.begin() + i)) + "'");
    }
  }
  return bound;
}

Status undefined_error(const Value& v) { return invalid_argument(v.undefined_reason()); }

Status type_error(std::string message) { return invalid_argument("TypeError: " + std::move(message)); }

}  // namespace leoam::chat
