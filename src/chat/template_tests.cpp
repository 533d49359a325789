#include "chat/template_tests.h"

#include <array>
#include <string>

#include "chat/python_text.h"
#include "chat/template_operators.h"

namespace leoam::chat {

namespace {

using TestFn = Result<bool> (*)(const Value& v, const CallArgs& args);

// A test of the value alone.
template <bool (*kPredicate)(const Value&)>
Result<bool> unary_test(const Value& v, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "test", {}).status());
  return kPredicate(v);
}

bool is_defined(const Value& v) { return !v.is_undefined(); }
bool is_undefined(const Value& v) { return v.is_undefined(); }
bool is_none(const Value& v) { return v.is_none(); }
bool is_boolean(const Value& v) { return v.is_bool(); }
bool is_true(const Value& v) { return v.is_bool() && v.as_bool(); }
bool is_false(const Value& v) { return v.is_bool() && !v.as_bool(); }
bool is_integer(const Value& v) { return v.is_int(); }
bool is_float(const Value& v) { return v.is_float(); }
bool is_number(const Value& v) { return v.is_number(); }
bool is_string(const Value& v) { return v.is_string(); }
bool is_mapping(const Value& v) { return v.is_dict() && !v.is_namespace(); }
// Undefined iterates (as empty) and has a length, so Jinja2 calls it iterable and a sequence.
bool is_iterable(const Value& v) { return v.is_undefined() || v.is_string() || v.is_list() || is_mapping(v); }
bool is_callable(const Value& v) { return v.is_function() || v.is_undefined(); }
bool is_escaped(const Value&) { return false; }  // no Markup values: autoescape is off
bool is_lower(const Value& v) { return v.is_string() && py::is_lower_text(v.as_string()); }
bool is_upper(const Value& v) { return v.is_string() && py::is_upper_text(v.as_string()); }

Result<Value> one_argument(const CallArgs& args, std::string_view test) {
  LEOAM_ASSIGN_OR_RETURN(auto a, bind_args(args, test, {"other"}, 1));
  return a[0];
}

template <int kOp>  // 0 ==, 1 !=, 2 <, 3 <=, 4 >, 5 >=
Result<bool> compare_test(const Value& v, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(Value other, one_argument(args, "comparison test"));
  if (kOp == 0) return values_equal(v, other);
  if (kOp == 1) return !values_equal(v, other);
  static constexpr std::array<std::string_view, 6> kNames = {"==", "!=", "<", "<=", ">", ">="};
  LEOAM_ASSIGN_OR_RETURN(int c, compare_values(v, other, kNames[kOp]));
  return kOp == 2 ? c < 0 : (kOp == 3 ? c <= 0 : (kOp == 4 ? c > 0 : c >= 0));
}

Result<bool> sameas_test(const Value& v, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(Value other, one_argument(args, "sameas"));
  return v.same_object(other);
}

Result<bool> in_test(const Value& v, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(Value seq, one_argument(args, "in"));
  return contains(seq, v);
}

template <int64_t kRemainder>
Result<bool> parity_test(const Value& v, const CallArgs& args) {
  LEOAM_RETURN_IF_ERROR(bind_args(args, "test", {}).status());
  LEOAM_ASSIGN_OR_RETURN(Value m, binary_op("%", v, Value::integer(2)));
  return values_equal(m, Value::integer(kRemainder));
}

Result<bool> divisibleby_test(const Value& v, const CallArgs& args) {
  LEOAM_ASSIGN_OR_RETURN(Value n, one_argument(args, "divisibleby"));
  LEOAM_ASSIGN_OR_RETURN(Value m, binary_op("%", v, n));
  return values_equal(m, Value::integer(0));
}

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

constexpr std::array<NamedTest, 37> kTests = {{
    {"defined", unary_test<is_defined>},
    {"undefined", unary_test<is_undefined>},
    {"none", unary_test<is_none>},
    {"boolean", unary_test<is_boolean>},
    {"true", unary_test<is_true>},
    {"false", unary_test<is_false>},
    {"integer", unary_test<is_integer>},
    {"float", unary_test<is_float>},
    {"number", unary_test<is_number>},
    {"string", unary_test<is_string>},
    {"mapping", unary_test<is_mapping>},
    {"iterable", unary_test<is_iterable>},
    {"sequence", unary_test<is_iterable>},
    {"callable", unary_test<is_callable>},
    {"escaped", unary_test<is_escaped>},
    {"lower", unary_test<is_lower>},
    {"upper", unary_test<is_upper>},
    {"sameas", sameas_test},
    {"eq", compare_test<0>},
    {"equalto", compare_test<0>},
    {"==", compare_test<0>},
    {"ne", compare_test<1>},
    {"!=", compare_test<1>},
    {"lt", compare_test<2>},
    {"lessthan", compare_test<2>},
    {"<", compare_test<2>},
    {"le", compare_test<3>},
    {"<=", compare_test<3>},
    {"gt", compare_test<4>},
    {"greaterthan", compare_test<4>},
    {">", compare_test<4>},
    {"ge", compare_test<5>},
    {">=", compare_test<5>},
    {"in", in_test},
    {"odd", parity_test<1>},
    {"even", parity_test<0>},
    {"divisibleby", divisibleby_test},
}};

TestFn find_test(std::string_view name) {
  for (const NamedTest& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

}  // namespace

bool has_test(std::string_view name) { return find_test(name) != nullptr; }

Result<bool> apply_test(std::string_view name, const Value& v, const CallArgs& args) {
  const TestFn fn = find_test(name);
  if (!fn) return invalid_argument("no test named '" + std::string(name) + "'");
  return fn(v, args);
}

}  // namespace leoam::chat
