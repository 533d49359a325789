#include "chat/template_interpreter.h"

#include <memory>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "chat/template_access.h"
#include "chat/template_filters.h"
#include "chat/template_globals.h"
#include "chat/template_operators.h"
#include "chat/template_tests.h"

namespace leoam::chat {

namespace {

constexpr int kMaxCallDepth = 100;  // macro recursion; Python would raise RecursionError near 1000

struct Scope {
  std::shared_ptr<Scope> parent;
  DictData vars;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      if (const Value* v = s->vars.find(name)) return v;
    }
    return nullptr;
  }
  void set(std::string_view name, Value value) { vars.set(std::string(name), std::move(value)); }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { kNext, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Value& context, const std::tm& now) : context_(context), now_(now) {}
  // `set ns.a = ns` makes a cycle of shared pointers; emptying every changed namespace breaks it.
  ~Interpreter() {
    for (const Value& ns : changed_namespaces_) ns.mutable_namespace().entries.clear();
  }
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  Result<std::string> run(const Body& program) {
    std::string out;
    LEOAM_RETURN_IF_ERROR(exec_body(program, std::make_shared<Scope>(), out).status());
    return out;
  }

 private:
  // The innermost node that sees an error names its line; outer ones pass it on unchanged.
  Status locate(const Status& s, int line) {
    if (located_) return s;
    located_ = true;
    return s.with_context("line " + std::to_string(line));
  }

  Value lookup(const std::string& name, const ScopePtr& scope) const {
    if (const Value* v = scope->find(name)) return *v;
    if (const Value* v = context_.as_dict().find(name)) return *v;
    if (std::optional<Value> fn = find_global_function(name, now_)) return *fn;
    return Value::undefined("'" + name + "' is undefined");
  }

  // ---- statements ----

  Result<Flow> exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const Stmt& s : body) {
      Result<Flow> flow = exec(s, scope, out);
      if (!flow.is_ok()) return locate(flow.status(), s.line);
      if (*flow != Flow::kNext) return flow;
    }
    return Flow::kNext;
  }

  Result<Flow> exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case StmtKind::kText:
        out += s.text;
        return Flow::kNext;
      case StmtKind::kPrint: {
        LEOAM_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
        append_str(out, v);
        return Flow::kNext;
      }
      case StmtKind::kIf:
        for (const IfBranch& branch : s.branches) {
          LEOAM_ASSIGN_OR_RETURN(Value test, eval(*branch.condition, scope));
          if (is_truthy(test)) return exec_body(branch.body, scope, out);
        }
        return exec_body(s.body, scope, out);
      case StmtKind::kFor:
        LEOAM_RETURN_IF_ERROR(exec_for(s, scope, out));
        return Flow::kNext;
      case StmtKind::kSet: {
        LEOAM_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
        LEOAM_RETURN_IF_ERROR(assign(s, std::move(v), scope));
        return Flow::kNext;
      }
      case StmtKind::kSetBlock:
      case StmtKind::kFilterBlock: {
        std::string text;
        LEOAM_RETURN_IF_ERROR(exec_body(s.body, scope, text).status());
        Value v = Value::string(std::move(text));
        if (s.filter) {
          LEOAM_ASSIGN_OR_RETURN(v, eval_filter(*s.filter, &v, scope));
        }
        if (s.kind == StmtKind::kFilterBlock) {
          append_str(out, v);
        } else {
          LEOAM_RETURN_IF_ERROR(assign(s, std::move(v), scope));
        }
        return Flow::kNext;
      }
      case StmtKind::kMacro:
        define_macro(s, scope);
        return Flow::kNext;
      case StmtKind::kScope:
        LEOAM_RETURN_IF_ERROR(exec_body(s.body, child_of(scope), out).status());
        return Flow::kNext;
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
    return internal_error("unknown statement kind");
  }

  // Binds `targets` (unpacking a sequence across several names), or sets a namespace attribute.
  Status assign(const Stmt& s, Value v, const ScopePtr& scope) {
    if (!s.attribute.empty()) {
      const Value ns = lookup(s.targets[0], scope);
      if (!ns.is_namespace()) return invalid_argument("cannot assign attribute on non-namespace object");
      ns.mutable_namespace().set(s.attribute, std::move(v));
      if (changed_.insert(&ns.as_dict()).second) changed_namespaces_.push_back(ns);
      return Status::ok();
    }
    return bind_targets(s.targets, v, *scope);
  }

  Status bind_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return Status::ok();
    }
    LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    if (items.size() < targets.size()) {
      return invalid_argument("ValueError: not enough values to unpack (expected " + std::to_string(targets.size()) +
                              ", got " + std::to_string(items.size()) + ")");
    }
    if (items.size() > targets.size()) {
      return invalid_argument("ValueError: too many values to unpack (expected " + std::to_string(targets.size()) +
                              ")");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
    return Status::ok();
  }

  Status exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    LEOAM_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr, scope));
    LEOAM_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(iterable));
    if (s.condition) {  // `for x in xs if cond`: loop.index and loop.length count the kept items
      std::vector<Value> kept;
      for (Value& item : items) {
        ScopePtr probe = child_of(scope);
        LEOAM_RETURN_IF_ERROR(bind_targets(s.targets, item, *probe));
        LEOAM_ASSIGN_OR_RETURN(Value keep, eval(*s.condition, probe));
        if (is_truthy(keep)) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, child_of(scope), out).status();
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      ScopePtr iteration = child_of(scope);
      LEOAM_RETURN_IF_ERROR(bind_targets(s.targets, items[static_cast<size_t>(i)], *iteration));
      iteration->set("loop", loop_object(items, i));
      LEOAM_ASSIGN_OR_RETURN(Flow flow, exec_body(s.body, iteration, out));
      if (flow == Flow::kBreak) break;
    }
    return Status::ok();
  }

  static Value loop_object(const std::vector<Value>& items, int64_t i) {
    const auto n = static_cast<int64_t>(items.size());
    DictData loop;
    loop.entries.reserve(13);
    loop.entries.emplace_back("index", Value::integer(i + 1));
    loop.entries.emplace_back("index0", Value::integer(i));
    loop.entries.emplace_back("revindex", Value::integer(n - i));
    loop.entries.emplace_back("revindex0", Value::integer(n - i - 1));
    loop.entries.emplace_back("first", Value::boolean(i == 0));
    loop.entries.emplace_back("last", Value::boolean(i == n - 1));
    loop.entries.emplace_back("length", Value::integer(n));
    loop.entries.emplace_back("depth", Value::integer(1));
    loop.entries.emplace_back("depth0", Value::integer(0));
    loop.entries.emplace_back("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                                                : Value::undefined("there is no previous item"));
    loop.entries.emplace_back("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                                    : Value::undefined("there is no next item"));
    loop.entries.emplace_back("cycle", Value::function("cycle", [i](const CallArgs& args) -> Result<Value> {
      if (args.positional.empty()) return type_error("no items for cycling given");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    }));
    return Value::dict(std::move(loop));
  }

  void define_macro(const Stmt& s, const ScopePtr& scope) {
    std::weak_ptr<Scope> closure = scope;  // weak: the macro is stored in that scope
    const Stmt* macro = &s;
    scope->set(s.name, Value::function(s.name, [this, macro, closure](const CallArgs& args) {
      return call_macro(*macro, closure, args);
    }));
  }

  // Missing arguments are undefined (Jinja2); extra ones land in `varargs` and `kwargs`.
  Result<Value> call_macro(const Stmt& m, const std::weak_ptr<Scope>& closure, const CallArgs& args) {
    ScopePtr parent = closure.lock();
    if (!parent) return invalid_argument("macro '" + m.name + "' is called after its scope ended");
    if (depth_ >= kMaxCallDepth) return invalid_argument("macro '" + m.name + "' recursed too deeply");
    ScopePtr scope = child_of(parent);
    std::vector<Value> varargs;
    DictData kwargs;
    for (size_t i = m.params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
    for (const auto& [key, value] : args.keyword) {
      bool is_param = false;
      for (size_t i = 0; i < m.params.size(); ++i) {
        if (m.params[i].name != key) continue;
        if (i < args.positional.size()) {
          return type_error("macro '" + m.name + "' got multiple values for argument '" + key + "'");
        }
        is_param = true;
      }
      if (!is_param) kwargs.set(key, value);
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      const MacroParam& p = m.params[i];
      const Value* given = i < args.positional.size() ? &args.positional[i] : nullptr;
      for (const auto& [key, value] : args.keyword) {
        if (key == p.name) given = &value;
      }
      if (given) {
        scope->set(p.name, *given);
      } else if (p.default_value) {
        LEOAM_ASSIGN_OR_RETURN(Value v, eval(*p.default_value, scope));
        scope->set(p.name, std::move(v));
      } else {
        scope->set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
      }
    }
    scope->set("varargs", Value::list(std::move(varargs), true));
    scope->set("kwargs", Value::dict(std::move(kwargs)));
    std::string out;
    ++depth_;
    Result<Flow> flow = exec_body(m.body, scope, out);
    --depth_;
    if (!flow.is_ok()) return flow.status();
    return Value::string(std::move(out));
  }

  // ---- expressions ----

  Result<Value> eval(const Expr& e, const ScopePtr& scope) {
    Result<Value> v = eval_node(e, scope);
    if (!v.is_ok()) return locate(v.status(), e.line);
    return v;
  }

  Result<CallArgs> eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.operands.size(); ++i) {
      LEOAM_ASSIGN_OR_RETURN(Value v, eval(*e.operands[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.keywords) {
      LEOAM_ASSIGN_OR_RETURN(Value v, eval(*expr, scope));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  // A filter node; its input is operands[0], or *block_input where that is null (filter blocks).
  Result<Value> eval_filter(const Expr& e, const Value* block_input, const ScopePtr& scope) {
    Value input;
    if (e.operands[0]) {
      const Expr& inner = *e.operands[0];
      if (inner.kind == ExprKind::kFilter) {
        LEOAM_ASSIGN_OR_RETURN(input, eval_filter(inner, block_input, scope));
      } else {
        LEOAM_ASSIGN_OR_RETURN(input, eval(inner, scope));
      }
    } else if (block_input) {
      input = *block_input;
    }
    LEOAM_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, scope));
    Result<Value> v = apply_filter(e.name, input, args);
    if (!v.is_ok()) return locate(v.status(), e.line);
    return v;
  }

  Result<bool> eval_compare(const Expr& e, const ScopePtr& scope) {
    LEOAM_ASSIGN_OR_RETURN(Value left, eval(*e.operands[0], scope));
    for (size_t i = 0; i < e.compare_ops.size(); ++i) {
      LEOAM_ASSIGN_OR_RETURN(Value right, eval(*e.operands[i + 1], scope));
      const std::string& op = e.compare_ops[i];
      bool holds = false;
      if (op == "==" || op == "!=") {
        holds = values_equal(left, right) == (op == "==");
      } else if (op == "in" || op == "not in") {
        LEOAM_ASSIGN_OR_RETURN(bool found, contains(right, left));
        holds = found == (op == "in");
      } else {
        LEOAM_ASSIGN_OR_RETURN(int c, compare_values(left, right, op));
        holds = op == "<" ? c < 0 : (op == "<=" ? c <= 0 : (op == ">" ? c > 0 : c >= 0));
      }
      if (!holds) return false;
      left = std::move(right);
    }
    return true;
  }

  Result<Value> eval_node(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName:
        return lookup(e.name, scope);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        items.reserve(e.operands.size());
        for (const ExprPtr& item : e.operands) {
          LEOAM_ASSIGN_OR_RETURN(Value v, eval(*item, scope));
          items.push_back(std::move(v));
        }
        return Value::list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        DictData dict;
        for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
          LEOAM_ASSIGN_OR_RETURN(Value key, eval(*e.operands[i], scope));
          LEOAM_ASSIGN_OR_RETURN(Value value, eval(*e.operands[i + 1], scope));
          if (!key.is_string()) return type_error("dict keys in templates must be str, not " + type_name(key));
          dict.set(key.as_string(), std::move(value));
        }
        return Value::dict(std::move(dict));
      }
      case ExprKind::kUnary: {
        LEOAM_ASSIGN_OR_RETURN(Value v, eval(*e.operands[0], scope));
        if (e.op == "not") return Value::boolean(!is_truthy(v));
        return unary_op(e.op, v);
      }
      case ExprKind::kBinary: {
        LEOAM_ASSIGN_OR_RETURN(Value a, eval(*e.operands[0], scope));
        LEOAM_ASSIGN_OR_RETURN(Value b, eval(*e.operands[1], scope));
        return binary_op(e.op, a, b);
      }
      case ExprKind::kConcat: {
        std::string out;
        for (const ExprPtr& part : e.operands) {
          LEOAM_ASSIGN_OR_RETURN(Value v, eval(*part, scope));
          append_str(out, v);
        }
        return Value::string(std::move(out));
      }
      case ExprKind::kCompare: {
        LEOAM_ASSIGN_OR_RETURN(bool holds, eval_compare(e, scope));
        return Value::boolean(holds);
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {  // Python's and/or yield an operand, not a bool
        LEOAM_ASSIGN_OR_RETURN(Value left, eval(*e.operands[0], scope));
        if (is_truthy(left) == (e.kind == ExprKind::kOr)) return left;
        return eval(*e.operands[1], scope);
      }
      case ExprKind::kCondition: {
        LEOAM_ASSIGN_OR_RETURN(Value test, eval(*e.operands[1], scope));
        if (is_truthy(test)) return eval(*e.operands[0], scope);
        if (e.operands[2]) return eval(*e.operands[2], scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      }
      case ExprKind::kAttribute: {
        LEOAM_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0], scope));
        return get_attribute(obj, e.name);
      }
      case ExprKind::kItem: {
        LEOAM_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0], scope));
        LEOAM_ASSIGN_OR_RETURN(Value key, eval(*e.operands[1], scope));
        return get_item(obj, key);
      }
      case ExprKind::kSlice: {
        LEOAM_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0], scope));
        Value bounds[3];
        for (size_t i = 0; i < 3; ++i) {
          if (e.operands[i + 1]) {
            LEOAM_ASSIGN_OR_RETURN(bounds[i], eval(*e.operands[i + 1], scope));
          }
        }
        auto bound = [&](size_t i) { return e.operands[i + 1] ? &bounds[i] : nullptr; };
        return get_slice(obj, bound(0), bound(1), bound(2));
      }
      case ExprKind::kCall: {
        LEOAM_ASSIGN_OR_RETURN(Value callee, eval(*e.operands[0], scope));
        LEOAM_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, scope));
        if (callee.is_undefined()) return undefined_error(callee);
        if (!callee.is_function()) return type_error("'" + type_name(callee) + "' object is not callable");
        return callee.call(args);
      }
      case ExprKind::kFilter:
        return eval_filter(e, nullptr, scope);
      case ExprKind::kTest: {
        LEOAM_ASSIGN_OR_RETURN(Value subject, eval(*e.operands[0], scope));
        LEOAM_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, scope));
        LEOAM_ASSIGN_OR_RETURN(bool passed, apply_test(e.name, subject, args));
        return Value::boolean(passed);
      }
    }
    return internal_error("unknown expression kind");
  }

  const Value& context_;
  std::tm now_;
  bool located_ = false;
  int depth_ = 0;
  std::unordered_set<const DictData*> changed_;
  std::vector<Value> changed_namespaces_;
};

}  // namespace

Result<std::string> render_template(const Body& program, const Value& context, const RenderOptions& options) {
  std::tm now{};
  if (options.now) {
    now = *options.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  return Interpreter(context, now).run(program);
}

}  // namespace leoam::chat
