// The syntax tree of a parsed template. Nodes are plain structs with a kind; which fields a kind
// uses is listed beside it. A tree is immutable after parsing and shared by concurrent renders.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/template_value.h"

namespace leoam::chat {

enum class ExprKind : uint8_t {
  kLiteral,    // literal
  kName,       // name
  kList,       // operands: the items
  kTuple,      // operands: the items
  kDict,       // operands: key0, value0, key1, value1, ...
  kUnary,      // op ("-", "+", "not"), operands: [x]
  kBinary,     // op ("+", "-", "*", "/", "//", "%", "**"), operands: [left, right]
  kConcat,     // operands: the parts of a ~ b ~ c
  kCompare,    // compare_ops[i] joins operands[i] and operands[i + 1]: a < b <= c
  kAnd,        // operands: [left, right]
  kOr,         // operands: [left, right]
  kCondition,  // operands: [value, condition, else value or null]: `value if condition else other`
  kAttribute,  // name: the attribute, operands: [object]: `obj.name`
  kItem,       // operands: [object, key]: `obj[key]`
  kSlice,      // operands: [object, start, stop, step], any of the last three null: `obj[a:b:c]`
  kCall,       // operands: [callee, positional args...], keywords
  kFilter,     // name, operands: [input or null (the body of a filter block), args...], keywords
  kTest,       // name, operands: [input, args...], keywords; `x is not t` is kUnary "not" around it
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int depth = 1;  // of the subtree; the parser bounds it, so evaluating and freeing never run deep
  Value literal;
  std::string name;
  std::string op;
  std::vector<std::string> compare_ops;  // "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

enum class StmtKind : uint8_t {
  kText,        // text: template data, output as is
  kPrint,       // expr: {{ expr }}
  kIf,          // branches (condition, body); body: the else branch
  kFor,         // targets, expr: the iterable, condition: the filter (or null), body, else_body
  kSet,         // targets (or targets[0] + attribute for `set ns.attr`), expr
  kSetBlock,    // targets[0], filter: applied to the body's output (or null), body
  kMacro,       // name, params, body
  kFilterBlock, // filter, body: {% filter upper %}...{% endfilter %}
  kScope,       // body, run in a scope of its own (Hugging Face's {% generation %})
  kBreak,
  kContinue,
};

struct Stmt;
using Body = std::vector<Stmt>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: no default (a missing argument is undefined)
};

struct IfBranch {
  ExprPtr condition;
  Body body;
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;
  std::string name;
  std::string attribute;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr condition;
  ExprPtr filter;
  std::vector<IfBranch> branches;
  std::vector<MacroParam> params;
  Body body;
  Body else_body;
};

}  // namespace leoam::chat
