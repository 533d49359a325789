// The values a template computes with, modelled on the Python objects Jinja2 sees: undefined,
// None, bool, int (64-bit), float, str (UTF-8), list and tuple, dict (string keys, insertion
// order), and callables. Containers are shared and immutable once built, as in Hugging Face's
// immutable sandbox; the one exception is namespace(), which `set ns.x = ...` changes in place.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace leoam::chat {

class Value;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // prints as (a, b) and never equals a list, as in Python
};

struct DictData {
  std::vector<std::pair<std::string, Value>> entries;  // insertion order, unique keys
  bool is_namespace = false;                           // namespace(...): prints as <Namespace {...}>

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces the value of an existing key in place
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<Result<Value>(const CallArgs&)>;

enum class ValueKind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

class Value {
 public:
  Value() = default;  // undefined, with no reason
  static Value undefined(std::string reason);  // reason: what using it reports ("'foo' is undefined")
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(DictData data);
  static Value function(std::string name, NativeFunction fn);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }  // lists and tuples
  bool is_dict() const { return kind_ == ValueKind::kDict; }  // dicts and namespaces
  bool is_function() const { return kind_ == ValueKind::kFunction; }
  bool is_integral() const { return is_bool() || is_int(); }  // Python's bool is an int
  bool is_number() const { return is_integral() || is_float(); }
  bool is_namespace() const { return is_dict() && as_dict().is_namespace; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(data_); }  // bool or int
  double as_double() const { return is_float() ? std::get<double>(data_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(data_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(data_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<DictData>>(data_); }
  DictData& mutable_namespace() const { return *std::get<std::shared_ptr<DictData>>(data_); }
  const std::string& undefined_reason() const;
  const std::string& function_name() const;
  Result<Value> call(const CallArgs& args) const;  // a function's call
  bool same_object(const Value& other) const;      // Python's `is`

 private:
  struct FunctionData {
    std::string name;
    NativeFunction fn;
  };
  // The undefined reason and str values share the string alternative, told apart by kind_.
  using Data = std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>,
                            std::shared_ptr<const ListData>, std::shared_ptr<DictData>,
                            std::shared_ptr<const FunctionData>>;

  Value(ValueKind kind, Data data) : kind_(kind), data_(std::move(data)) {}

  ValueKind kind_ = ValueKind::kUndefined;
  Data data_;
};

bool is_truthy(const Value& v);                        // Python's bool(): undefined is false
bool values_equal(const Value& a, const Value& b);     // Python's ==
Result<int> compare_values(const Value& a, const Value& b, std::string_view op);  // <0, 0, >0, or TypeError
std::string type_name(const Value& v);                 // Python's type name: 'str', 'NoneType', ...

std::string python_str(const Value& v);   // str(v); undefined prints as ""
std::string python_repr(const Value& v);  // repr(v)
void append_str(std::string& out, const Value& v);  // out += str(v), without copying strings

// Binds a call's arguments to named parameters as Python does: [params.size()], absent ones left
// undefined. Errors: too many positional arguments, unknown or repeated keywords, a missing one of
// the first n_required.
Result<std::vector<Value>> bind_args(const CallArgs& args, std::string_view function,
                                     std::initializer_list<std::string_view> params, size_t n_required = 0);

Status undefined_error(const Value& v);  // the error of using an undefined value
Status type_error(std::string message);  // a Python TypeError

}  // namespace leoam::chat
