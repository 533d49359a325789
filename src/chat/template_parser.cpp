#include "chat/template_parser.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

namespace leoam::chat {

namespace {

using Names = std::initializer_list<std::string_view>;

bool contains(Names names, std::string_view s) { return std::find(names.begin(), names.end(), s) != names.end(); }

std::string quoted_list(Names names) {
  std::string out;
  size_t i = 0;
  for (std::string_view n : names) {
    if (i > 0) out += (i + 1 == names.size()) ? " or " : ", ";
    out += "'" + std::string(n) + "'";
    ++i;
  }
  return out;
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kData: return "template text";
    case TokenKind::kVariableBegin: return "'{{'";
    case TokenKind::kVariableEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kName: return "'" + t.text + "'";
    case TokenKind::kString: return "a string";
    case TokenKind::kInteger: return "an integer";
    case TokenKind::kFloat: return "a number";
    case TokenKind::kOperator: return "'" + t.text + "'";
    case TokenKind::kEnd: return "end of template";
  }
  return "a token";
}

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

constexpr int kMaxNesting = 300;    // parser recursion (about 3 a bracket level, 1 a block): ~100 brackets deep
constexpr int kMaxExprDepth = 400;  // of an expression tree, e.g. a long a + b + c + ... chain

// An open block, for messages about where it started.
struct OpenBlock {
  std::string tag;
  int line = 0;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<Body> parse_all() {
    Body body;
    LEOAM_RETURN_IF_ERROR(subparse({}, &body));
    return body;
  }

 private:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool at_op(std::string_view op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool at_name(std::string_view name) const { return cur().kind == TokenKind::kName && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }

  Status error(const std::string& what) const {
    return invalid_argument("template syntax error at " + source_position(cur().line, cur().column) + what);
  }
  Status expected(const std::string& what) const { return error("expected " + what + ", got " + describe(cur())); }

  Status expect_op(std::string_view op) {
    if (!skip_op(op)) return expected("'" + std::string(op) + "'");
    return Status::ok();
  }
  Status expect_kind(TokenKind kind, const std::string& what) {
    if (cur().kind != kind) return expected(what);
    advance();
    return Status::ok();
  }
  Result<std::string> expect_name() {
    if (cur().kind != TokenKind::kName) return expected("a name");
    std::string name = cur().text;
    advance();
    return name;
  }

  // ---- statements ----

  // Template data, {{ }} and {% %} until a block tag named in end_tags (left as the current token).
  Status subparse(Names end_tags, Body* body) {
    while (cur().kind != TokenKind::kEnd) {
      const Token& t = cur();
      if (t.kind == TokenKind::kData) {
        Stmt s;
        s.kind = StmtKind::kText;
        s.line = t.line;
        s.text = t.text;
        body->push_back(std::move(s));
        advance();
      } else if (t.kind == TokenKind::kVariableBegin) {
        Stmt s;
        s.kind = StmtKind::kPrint;
        s.line = t.line;
        advance();
        LEOAM_ASSIGN_OR_RETURN(s.expr, parse_tuple(false, true, {}));
        LEOAM_RETURN_IF_ERROR(expect_kind(TokenKind::kVariableEnd, "'}}'"));
        body->push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        advance();
        if (cur().kind == TokenKind::kName && contains(end_tags, cur().text)) return Status::ok();
        LEOAM_ASSIGN_OR_RETURN(Stmt s, parse_statement(end_tags));
        LEOAM_RETURN_IF_ERROR(expect_kind(TokenKind::kBlockEnd, "'%}'"));
        body->push_back(std::move(s));
      } else {
        return error("unexpected " + describe(t));
      }
    }
    if (end_tags.size() > 0) {
      return error("unexpected end of template; expected " + quoted_list(end_tags) + open_hint());
    }
    return Status::ok();
  }

  std::string open_hint() const {
    if (open_.empty()) return "";
    return " to close the '" + open_.back().tag + "' at line " + std::to_string(open_.back().line);
  }

  // After a statement's header: an optional ':' and '%}', then the body up to an end tag.
  Result<Body> parse_statements(Names end_tags) {
    skip_op(":");
    LEOAM_RETURN_IF_ERROR(expect_kind(TokenKind::kBlockEnd, "'%}'"));
    Body body;
    LEOAM_RETURN_IF_ERROR(subparse(end_tags, &body));
    return body;
  }

  // Consumes the end tag the body stopped at.
  Result<Body> parse_block(Names end_tags) {
    LEOAM_ASSIGN_OR_RETURN(Body body, parse_statements(end_tags));
    advance();
    return body;
  }

  Result<Stmt> parse_statement(Names enclosing_end_tags) {
    Nesting nesting(this);
    if (nesting.too_deep()) return too_deep();
    if (cur().kind != TokenKind::kName) return expected("a tag name");
    const std::string tag = cur().text;
    Stmt s;
    s.line = cur().line;
    open_.push_back({tag, s.line});
    Status status = Status::ok();
    if (tag == "for") {
      status = parse_for(&s);
    } else if (tag == "if") {
      status = parse_if(&s);
    } else if (tag == "set") {
      status = parse_set(&s);
    } else if (tag == "macro") {
      status = parse_macro(&s);
    } else if (tag == "filter") {
      status = parse_filter_block(&s);
    } else if (tag == "generation") {
      advance();
      s.kind = StmtKind::kScope;
      auto body = parse_block({"endgeneration"});
      if (body.is_ok()) {
        s.body = std::move(body).value();
      } else {
        status = body.status();
      }
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) {
        status = error("'" + tag + "' outside a for loop");
      } else {
        advance();
        s.kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      }
    } else if (contains({"include", "extends", "import", "from", "block", "call", "with", "autoescape", "do"}, tag)) {
      status = error("the '" + tag + "' tag is not supported in chat templates");
    } else {
      open_.pop_back();
      std::string message = "unknown tag '" + tag + "'";
      if (enclosing_end_tags.size() > 0) message += "; expected " + quoted_list(enclosing_end_tags) + open_hint();
      return error(message);
    }
    open_.pop_back();
    if (!status.is_ok()) return status;
    return s;
  }

  Status parse_for(Stmt* s) {
    s->kind = StmtKind::kFor;
    advance();
    LEOAM_RETURN_IF_ERROR(parse_targets(&s->targets));
    if (!skip_name("in")) return expected("'in'");
    LEOAM_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, false, {"recursive"}));
    if (skip_name("if")) {
      LEOAM_ASSIGN_OR_RETURN(s->condition, parse_expression(true));
    }
    if (at_name("recursive")) return error("recursive loops are not supported");
    ++loop_depth_;
    auto body = parse_statements({"endfor", "else"});
    --loop_depth_;
    if (!body.is_ok()) return body.status();
    s->body = std::move(body).value();
    if (skip_name("else")) {
      LEOAM_ASSIGN_OR_RETURN(s->else_body, parse_block({"endfor"}));
    } else {
      advance();  // endfor
    }
    return Status::ok();
  }

  Status parse_if(Stmt* s) {
    s->kind = StmtKind::kIf;
    advance();
    while (true) {
      IfBranch branch;
      LEOAM_ASSIGN_OR_RETURN(branch.condition, parse_tuple(false, false, {}));
      LEOAM_ASSIGN_OR_RETURN(branch.body, parse_statements({"elif", "else", "endif"}));
      s->branches.push_back(std::move(branch));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        LEOAM_ASSIGN_OR_RETURN(s->body, parse_block({"endif"}));
      } else {
        advance();  // endif
      }
      return Status::ok();
    }
  }

  Status parse_set(Stmt* s) {
    advance();
    if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == ".") {
      s->targets.push_back(cur().text);
      advance();
      advance();
      LEOAM_ASSIGN_OR_RETURN(s->attribute, expect_name());
    } else {
      LEOAM_RETURN_IF_ERROR(parse_targets(&s->targets));
    }
    if (skip_op("=")) {
      s->kind = StmtKind::kSet;
      LEOAM_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}));
      return Status::ok();
    }
    s->kind = StmtKind::kSetBlock;
    if (s->targets.size() != 1) return expected("'='");
    if (at_op("|")) {
      LEOAM_ASSIGN_OR_RETURN(s->filter, parse_filters(nullptr));
    }
    LEOAM_ASSIGN_OR_RETURN(s->body, parse_block({"endset"}));
    return Status::ok();
  }

  Status parse_macro(Stmt* s) {
    s->kind = StmtKind::kMacro;
    advance();
    LEOAM_ASSIGN_OR_RETURN(s->name, expect_name());
    LEOAM_RETURN_IF_ERROR(expect_op("("));
    while (!at_op(")")) {
      if (!s->params.empty()) LEOAM_RETURN_IF_ERROR(expect_op(","));
      if (at_op(")")) break;
      MacroParam param;
      LEOAM_ASSIGN_OR_RETURN(param.name, expect_name());
      if (skip_op("=")) {
        LEOAM_ASSIGN_OR_RETURN(param.default_value, parse_expression(true));
      } else if (!s->params.empty() && s->params.back().default_value) {
        return error("non-default argument follows default argument");
      }
      s->params.push_back(std::move(param));
    }
    advance();
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    auto body = parse_block({"endmacro"});
    loop_depth_ = saved_depth;
    if (!body.is_ok()) return body.status();
    s->body = std::move(body).value();
    return Status::ok();
  }

  Status parse_filter_block(Stmt* s) {
    s->kind = StmtKind::kFilterBlock;
    advance();
    LEOAM_ASSIGN_OR_RETURN(s->filter, parse_filters(nullptr, true));
    LEOAM_ASSIGN_OR_RETURN(s->body, parse_block({"endfilter"}));
    return Status::ok();
  }

  // Loop and assignment targets: `a` or `a, b` or `(a, b)`.
  Status parse_targets(std::vector<std::string>* targets) {
    const bool parenthesized = skip_op("(");
    while (true) {
      LEOAM_ASSIGN_OR_RETURN(std::string name, expect_name());
      targets->push_back(std::move(name));
      if (!skip_op(",")) break;
      if (cur().kind != TokenKind::kName) break;  // a trailing comma
    }
    if (parenthesized) LEOAM_RETURN_IF_ERROR(expect_op(")"));
    return Status::ok();
  }

  // ---- expressions ----

  bool at_tuple_end(Names extra_end_names) const {
    if (cur().kind == TokenKind::kVariableEnd || cur().kind == TokenKind::kBlockEnd || at_op(")")) return true;
    return cur().kind == TokenKind::kName && contains(extra_end_names, cur().text);
  }

  // Comma-separated expressions; one without a comma is just itself.
  Result<ExprPtr> parse_tuple(bool explicit_parens, bool with_condexpr, Names extra_end_names) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) LEOAM_RETURN_IF_ERROR(expect_op(","));
      if (at_tuple_end(extra_end_names)) break;
      LEOAM_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(with_condexpr));
      items.push_back(std::move(item));
      if (!at_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return expected("an expression");
    }
    ExprPtr tuple = make_expr(ExprKind::kTuple, line);
    tuple->operands = std::move(items);
    return checked(std::move(tuple));
  }

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    Nesting nesting(this);
    if (nesting.too_deep()) return too_deep();
    if (!with_condexpr) return parse_or();
    const int line = cur().line;
    LEOAM_ASSIGN_OR_RETURN(ExprPtr value, parse_or());
    while (skip_name("if")) {
      ExprPtr cond = make_expr(ExprKind::kCondition, line);
      LEOAM_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
      ExprPtr other;
      if (skip_name("else")) {
        LEOAM_ASSIGN_OR_RETURN(other, parse_expression(true));
      }
      cond->operands.push_back(std::move(value));
      cond->operands.push_back(std::move(test));
      cond->operands.push_back(std::move(other));
      LEOAM_ASSIGN_OR_RETURN(value, checked(std::move(cond)));
    }
    return value;
  }

  Result<ExprPtr> make_pair(ExprKind kind, int line, ExprPtr left, ExprPtr right) const {
    ExprPtr e = make_expr(kind, line);
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return checked(std::move(e));
  }

  Result<ExprPtr> parse_or() { return parse_logical(ExprKind::kOr, "or", &Parser::parse_and); }
  Result<ExprPtr> parse_and() { return parse_logical(ExprKind::kAnd, "and", &Parser::parse_not); }

  // left (keyword right)*, left-associative.
  Result<ExprPtr> parse_logical(ExprKind kind, std::string_view keyword, Result<ExprPtr> (Parser::*next)()) {
    LEOAM_ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (at_name(keyword)) {
      const int line = cur().line;
      advance();
      LEOAM_ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      LEOAM_ASSIGN_OR_RETURN(left, make_pair(kind, line, std::move(left), std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parse_not() {
    Nesting nesting(this);
    if (nesting.too_deep()) return too_deep();
    if (at_name("not")) {
      ExprPtr e = make_expr(ExprKind::kUnary, cur().line);
      e->op = "not";
      advance();
      LEOAM_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
      e->operands.push_back(std::move(operand));
      return checked(std::move(e));
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    const int line = cur().line;
    LEOAM_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOperator &&
          contains({"==", "!=", "<", "<=", ">", ">="}, cur().text)) {
        op = cur().text;
        advance();
      } else if (at_name("in")) {
        op = "in";
        advance();
      } else if (at_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_expr(ExprKind::kCompare, line);
        cmp->operands.push_back(std::move(first));
      }
      LEOAM_ASSIGN_OR_RETURN(ExprPtr right, parse_math1());
      cmp->compare_ops.push_back(std::move(op));
      cmp->operands.push_back(std::move(right));
    }
    if (!cmp) return first;
    return checked(std::move(cmp));
  }

  template <typename Next>
  Result<ExprPtr> parse_binary_level(Names ops, Next next) {
    LEOAM_ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (cur().kind == TokenKind::kOperator && contains(ops, cur().text)) {
      ExprPtr e = make_expr(ExprKind::kBinary, cur().line);
      e->op = cur().text;
      advance();
      LEOAM_ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      e->operands.push_back(std::move(left));
      e->operands.push_back(std::move(right));
      LEOAM_ASSIGN_OR_RETURN(left, checked(std::move(e)));
    }
    return left;
  }

  Result<ExprPtr> parse_math1() { return parse_binary_level({"+", "-"}, &Parser::parse_concat); }

  Result<ExprPtr> parse_concat() {
    const int line = cur().line;
    LEOAM_ASSIGN_OR_RETURN(ExprPtr first, parse_math2());
    if (!at_op("~")) return first;
    ExprPtr concat = make_expr(ExprKind::kConcat, line);
    concat->operands.push_back(std::move(first));
    while (skip_op("~")) {
      LEOAM_ASSIGN_OR_RETURN(ExprPtr part, parse_math2());
      concat->operands.push_back(std::move(part));
    }
    return checked(std::move(concat));
  }

  Result<ExprPtr> parse_math2() { return parse_binary_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  Result<ExprPtr> parse_pow() { return parse_binary_level({"**"}, &Parser::parse_unary_with_filters); }
  Result<ExprPtr> parse_unary_with_filters() { return parse_unary(true); }

  Result<ExprPtr> parse_unary(bool with_filters) {
    Nesting nesting(this);
    if (nesting.too_deep()) return too_deep();
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      node = make_expr(ExprKind::kUnary, cur().line);
      node->op = cur().text;
      advance();
      LEOAM_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      node->operands.push_back(std::move(operand));
      LEOAM_ASSIGN_OR_RETURN(node, checked(std::move(node)));
    } else {
      LEOAM_ASSIGN_OR_RETURN(node, parse_primary());
    }
    LEOAM_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (with_filters) {
      LEOAM_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = cur();
    ExprPtr e = make_expr(ExprKind::kLiteral, t.line);
    switch (t.kind) {
      case TokenKind::kName:
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          e->literal = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      case TokenKind::kString: {
        std::string s;
        while (cur().kind == TokenKind::kString) {  // adjacent literals join: "a" "b"
          s += cur().text;
          advance();
        }
        e->literal = Value::string(std::move(s));
        return e;
      }
      case TokenKind::kInteger:
        e->literal = Value::integer(t.int_value);
        advance();
        return e;
      case TokenKind::kFloat:
        e->literal = Value::number(t.float_value);
        advance();
        return e;
      case TokenKind::kOperator:
        if (t.text == "(") {
          advance();
          LEOAM_ASSIGN_OR_RETURN(ExprPtr inner, parse_tuple(true, true, {}));
          LEOAM_RETURN_IF_ERROR(expect_op(")"));
          return inner;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    return error("unexpected " + describe(t));
  }

  Result<ExprPtr> parse_list() {
    ExprPtr list = make_expr(ExprKind::kList, cur().line);
    advance();
    while (!at_op("]")) {
      if (!list->operands.empty()) LEOAM_RETURN_IF_ERROR(expect_op(","));
      if (at_op("]")) break;
      LEOAM_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
      list->operands.push_back(std::move(item));
    }
    advance();
    return checked(std::move(list));
  }

  Result<ExprPtr> parse_dict() {
    ExprPtr dict = make_expr(ExprKind::kDict, cur().line);
    advance();
    while (!at_op("}")) {
      if (!dict->operands.empty()) LEOAM_RETURN_IF_ERROR(expect_op(","));
      if (at_op("}")) break;
      LEOAM_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
      LEOAM_RETURN_IF_ERROR(expect_op(":"));
      LEOAM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      dict->operands.push_back(std::move(key));
      dict->operands.push_back(std::move(value));
    }
    advance();
    return checked(std::move(dict));
  }

  Result<ExprPtr> parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".") || at_op("[")) {
        LEOAM_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
      } else if (at_op("(")) {
        LEOAM_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        LEOAM_ASSIGN_OR_RETURN(node, parse_filters(std::move(node)));
      } else if (at_name("is")) {
        LEOAM_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
      } else if (at_op("(")) {
        LEOAM_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr node) {
    const int line = cur().line;
    if (skip_op(".")) {
      if (cur().kind == TokenKind::kName) {
        ExprPtr attr = make_expr(ExprKind::kAttribute, line);
        attr->name = cur().text;
        attr->operands.push_back(std::move(node));
        advance();
        return checked(std::move(attr));
      }
      if (cur().kind != TokenKind::kInteger) return expected("a name or number after '.'");
      ExprPtr key = make_expr(ExprKind::kLiteral, line);
      key->literal = Value::integer(cur().int_value);
      advance();
      return make_pair(ExprKind::kItem, line, std::move(node), std::move(key));
    }
    advance();  // [
    std::vector<ExprPtr> keys;
    while (!at_op("]")) {
      if (!keys.empty()) LEOAM_RETURN_IF_ERROR(expect_op(","));
      LEOAM_ASSIGN_OR_RETURN(ExprPtr key, parse_subscribed(node));
      if (key->kind == ExprKind::kSlice) {
        LEOAM_RETURN_IF_ERROR(expect_op("]"));
        return key;
      }
      keys.push_back(std::move(key));
    }
    if (keys.empty()) return expected("a subscript");
    advance();
    ExprPtr key;
    if (keys.size() == 1) {
      key = std::move(keys[0]);
    } else {
      key = make_expr(ExprKind::kTuple, line);
      key->operands = std::move(keys);
      LEOAM_ASSIGN_OR_RETURN(key, checked(std::move(key)));
    }
    return make_pair(ExprKind::kItem, line, std::move(node), std::move(key));
  }

  // One subscript: an expression, or a slice [start]:[stop][:[step]] that takes over `node`.
  Result<ExprPtr> parse_subscribed(ExprPtr& node) {
    const int line = cur().line;
    ExprPtr start;
    if (!at_op(":")) {
      LEOAM_ASSIGN_OR_RETURN(start, parse_expression(true));
      if (!at_op(":")) return start;
    }
    advance();  // :
    ExprPtr slice = make_expr(ExprKind::kSlice, line);
    ExprPtr stop;
    ExprPtr step;
    if (!at_op(":") && !at_op("]") && !at_op(",")) {
      LEOAM_ASSIGN_OR_RETURN(stop, parse_expression(true));
    }
    if (skip_op(":") && !at_op("]") && !at_op(",")) {
      LEOAM_ASSIGN_OR_RETURN(step, parse_expression(true));
    }
    slice->operands.push_back(std::move(node));
    slice->operands.push_back(std::move(start));
    slice->operands.push_back(std::move(stop));
    slice->operands.push_back(std::move(step));
    return checked(std::move(slice));
  }

  // (args): positional then keyword arguments; appended to `call`'s operands and keywords.
  Status parse_call_args(Expr* call) {
    LEOAM_RETURN_IF_ERROR(expect_op("("));
    bool first = true;
    while (!at_op(")")) {
      if (!first) {
        LEOAM_RETURN_IF_ERROR(expect_op(","));
        if (at_op(")")) break;
      }
      first = false;
      if (at_op("*") || at_op("**")) return error("*args and **kwargs in calls are not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        LEOAM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        call->keywords.emplace_back(std::move(key), std::move(value));
      } else {
        if (!call->keywords.empty()) return error("a positional argument follows keyword arguments");
        LEOAM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        call->operands.push_back(std::move(value));
      }
    }
    advance();
    return Status::ok();
  }

  Result<ExprPtr> parse_call(ExprPtr callee) {
    ExprPtr call = make_expr(ExprKind::kCall, cur().line);
    call->operands.push_back(std::move(callee));
    LEOAM_RETURN_IF_ERROR(parse_call_args(call.get()));
    return checked(std::move(call));
  }

  // `|name(args)|name...`, or with start_inline the chain of a filter block (no leading '|').
  Result<ExprPtr> parse_filters(ExprPtr node, bool start_inline = false) {
    while (at_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      ExprPtr filter = make_expr(ExprKind::kFilter, cur().line);
      LEOAM_ASSIGN_OR_RETURN(filter->name, expect_name());
      filter->operands.push_back(std::move(node));
      if (at_op("(")) LEOAM_RETURN_IF_ERROR(parse_call_args(filter.get()));
      LEOAM_ASSIGN_OR_RETURN(node, checked(std::move(filter)));
    }
    return node;
  }

  Result<ExprPtr> parse_test(ExprPtr node) {
    const int line = cur().line;
    advance();  // is
    const bool negated = skip_name("not");
    ExprPtr test = make_expr(ExprKind::kTest, line);
    LEOAM_ASSIGN_OR_RETURN(test->name, expect_name());
    test->operands.push_back(std::move(node));
    const Token& t = cur();
    const bool starts_argument =
        t.kind == TokenKind::kName || t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
        t.kind == TokenKind::kFloat || (t.kind == TokenKind::kOperator && (t.text == "[" || t.text == "{"));
    if (at_op("(")) {
      LEOAM_RETURN_IF_ERROR(parse_call_args(test.get()));
    } else if (starts_argument && !at_name("else") && !at_name("or") && !at_name("and")) {
      if (at_name("is")) return error("tests cannot be chained with 'is'");
      LEOAM_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
      LEOAM_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
      test->operands.push_back(std::move(arg));
    }
    LEOAM_ASSIGN_OR_RETURN(test, checked(std::move(test)));
    if (!negated) return test;
    ExprPtr negation = make_expr(ExprKind::kUnary, line);
    negation->op = "not";
    negation->operands.push_back(std::move(test));
    return checked(std::move(negation));
  }

  // Counts one level of parser recursion while alive; too many is an error, not a stack overflow.
  class Nesting {
   public:
    explicit Nesting(Parser* p) : p_(p) { ++p_->nesting_; }
    ~Nesting() { --p_->nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    bool too_deep() const { return p_->nesting_ > kMaxNesting; }

   private:
    Parser* p_;
  };

  Status too_deep() const { return error("expression or block nested too deeply"); }

  // Sets e's depth from its children's, refusing trees deeper than kMaxExprDepth.
  Result<ExprPtr> checked(ExprPtr e) const {
    int depth = 0;
    for (const ExprPtr& child : e->operands) {
      if (child) depth = std::max(depth, child->depth);
    }
    for (const auto& kw : e->keywords) depth = std::max(depth, kw.second->depth);
    e->depth = depth + 1;
    if (e->depth > kMaxExprDepth) return too_deep();
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
  std::vector<OpenBlock> open_;
};

}  // namespace

Result<Body> parse_template(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_all(); }

}  // namespace leoam::chat
