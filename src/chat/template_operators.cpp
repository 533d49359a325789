#include "chat/template_operators.h"

#include <cmath>
#include <string>
#include <vector>

#include "chat/template_methods.h"

namespace leoam::chat {

namespace {

Status unsupported_operands(std::string_view op, const Value& a, const Value& b) {
  return type_error("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

Status overflow() { return invalid_argument("OverflowError: integer result does not fit in 64 bits"); }

// Python's float floor division and modulo (CPython's float_divmod).
std::pair<double, double> float_divmod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floor_div = 0.0;
  if (div != 0.0) {
    floor_div = std::floor(div);
    if (div - floor_div > 0.5) floor_div += 1.0;
  } else {
    floor_div = std::copysign(0.0, x / y);
  }
  return {floor_div, mod};
}

Result<Value> repeat(const Value& seq, int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i) {
    items.insert(items.end(), seq.as_list().items.begin(), seq.as_list().items.end());
  }
  return Value::list(std::move(items), seq.as_list().is_tuple);
}

Result<Value> int_op(std::string_view op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) return overflow();
  } else if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) return overflow();
  } else if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) return overflow();
  } else if (op == "/") {
    if (y == 0) return invalid_argument("ZeroDivisionError: division by zero");
    return Value::number(static_cast<double>(x) / static_cast<double>(y));
  } else if (op == "//" || op == "%") {
    if (y == 0) return invalid_argument("ZeroDivisionError: integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return op == "%" ? Value::integer(0) : Result<Value>(overflow());
    int64_t q = x / y;
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    r = op == "//" ? q : m;
  } else {  // **
    if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
    r = 1;
    for (int64_t base = x, e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return overflow();
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow();
    }
  }
  return Value::integer(r);
}

Result<Value> float_op(std::string_view op, double x, double y) {
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0.0) return invalid_argument("ZeroDivisionError: float division by zero");
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0.0) return invalid_argument("ZeroDivisionError: float divmod()");
    const auto [q, m] = float_divmod(x, y);
    return Value::number(op == "//" ? q : m);
  }
  if (x == 0.0 && y < 0) return invalid_argument("ZeroDivisionError: 0.0 cannot be raised to a negative power");
  return Value::number(std::pow(x, y));
}

}  // namespace

Result<Value> binary_op(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return int_op(op, a.as_int(), b.as_int());
    return float_op(op, a.as_double(), b.as_double());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
    if (a.is_string()) return type_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
  } else if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
    if (a.is_integral() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
  } else if (op == "%" && a.is_string()) {
    LEOAM_ASSIGN_OR_RETURN(std::string s, percent_format(a.as_string(), b));
    return Value::string(std::move(s));
  }
  return unsupported_operands(op, a, b);
}

Result<Value> unary_op(std::string_view op, const Value& v) {
  if (v.is_undefined()) return undefined_error(v);
  if (!v.is_number()) return type_error("bad operand type for unary " + std::string(op) + ": '" + type_name(v) + "'");
  if (op == "+") return v.is_bool() ? Value::integer(v.as_int()) : v;
  if (v.is_float()) return Value::number(-v.as_double());
  if (v.as_int() == INT64_MIN) return overflow();
  return Value::integer(-v.as_int());
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined:
      return false;
    case ValueKind::kString:
      if (!item.is_string()) {
        return type_error("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& v : container.as_list().items) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case ValueKind::kDict:
      if (container.is_namespace()) break;
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      break;
  }
  return type_error("argument of type '" + type_name(container) + "' is not iterable");
}

}  // namespace leoam::chat
