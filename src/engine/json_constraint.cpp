#include "engine/json_constraint.h"

#include <algorithm>
#include <bit>
#include <climits>

namespace leoam {

struct JsonConstraint::Node {
  // kSwitch: one of `children`, the one whose index is that of the literal the object's property
  // before it took (a tool call's arguments, after its name).
  enum Kind : uint8_t { kAny, kObject, kFreeObject, kArray, kString, kInteger, kNumber, kLiterals, kSwitch };
  Kind kind = kAny;
  std::vector<std::string> keys;  // kObject: the text before each property's value, `"name":` (`,"name":` after the first)
  std::vector<int> children;      // kObject: each property's node; kArray: the items' node
  int min_items = 0, max_items = INT_MAX;
  int max_length = INT_MAX;        // kString, in characters
  std::vector<std::string> literals;  // kLiterals: the JSON texts a value may be
  int64_t min_chars = 0;           // of a whole value of this node
  std::vector<int64_t> rest;       // kObject: rest[i] = the fewest characters of properties i.. (keys and values)
};

namespace {

using Json = nlohmann::json;

// The generic nodes, first in every table: json_object's values.
constexpr int kFreeObjectNode = 0, kAnyNode = 1, kAnyArrayNode = 2, kFreeStringNode = 3, kNumberNode = 4,
              kBoolNullNode = 5;

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

}  // namespace

JsonConstraint::JsonConstraint(std::shared_ptr<const std::vector<Node>> nodes, int root) : nodes_(std::move(nodes)) {
  push(root);
}

JsonConstraint JsonConstraint::any_object() {
  std::vector<Node> nodes(6);
  nodes[kFreeObjectNode].kind = Node::kFreeObject;
  nodes[kFreeObjectNode].min_chars = 2;
  nodes[kAnyNode].kind = Node::kAny;
  nodes[kAnyNode].min_chars = 1;
  nodes[kAnyArrayNode].kind = Node::kArray;
  nodes[kAnyArrayNode].children = {kAnyNode};
  nodes[kAnyArrayNode].min_chars = 2;
  nodes[kFreeStringNode].kind = Node::kString;
  nodes[kFreeStringNode].min_chars = 2;
  nodes[kNumberNode].kind = Node::kNumber;
  nodes[kNumberNode].min_chars = 1;
  nodes[kBoolNullNode].kind = Node::kLiterals;
  nodes[kBoolNullNode].literals = {"true", "false", "null"};
  nodes[kBoolNullNode].min_chars = 4;
  return JsonConstraint(std::make_shared<const std::vector<Node>>(std::move(nodes)), kFreeObjectNode);
}

Result<JsonConstraint> JsonConstraint::from_schema(const Json& schema) {
  std::vector<Node> nodes = *any_object().nodes_;
  LEOAM_ASSIGN_OR_RETURN(const int root, add_schema(nodes, schema, "schema"));
  return JsonConstraint(std::make_shared<const std::vector<Node>>(std::move(nodes)), root);
}

Result<JsonConstraint> JsonConstraint::tool_call(const std::vector<std::pair<std::string, Json>>& functions) {
  if (functions.empty() || functions.size() > 64) return invalid_argument("tool_call: 1 to 64 functions");
  std::vector<Node> nodes = *any_object().nodes_;
  Node names, arguments;
  names.kind = Node::kLiterals;
  arguments.kind = Node::kSwitch;
  arguments.min_chars = INT64_MAX;
  for (const auto& [name, parameters] : functions) {
    if (Json(name).dump().find('\\') != std::string::npos) return invalid_argument("tool_call: a function name with escapes");
    names.literals.push_back(Json(name).dump());
    LEOAM_ASSIGN_OR_RETURN(const int params, add_schema(nodes, parameters, "tools." + name + ".parameters"));
    arguments.children.push_back(params);
    arguments.min_chars = std::min(arguments.min_chars, nodes[params].min_chars);
  }
  names.min_chars = INT64_MAX;
  for (const std::string& l : names.literals) names.min_chars = std::min<int64_t>(names.min_chars, static_cast<int64_t>(l.size()));
  nodes.push_back(std::move(names));
  const int names_node = static_cast<int>(nodes.size()) - 1;
  nodes.push_back(std::move(arguments));
  const int arguments_node = static_cast<int>(nodes.size()) - 1;
  Node call;
  call.kind = Node::kObject;
  call.keys = {"\"name\":", ",\"arguments\":"};
  call.children = {names_node, arguments_node};
  call.rest = {static_cast<int64_t>(call.keys[0].size() + call.keys[1].size()) + nodes[names_node].min_chars +
                   nodes[arguments_node].min_chars,
               static_cast<int64_t>(call.keys[1].size()) + nodes[arguments_node].min_chars, 0};
  call.min_chars = 2 + call.rest[0];
  nodes.push_back(std::move(call));
  const int root = static_cast<int>(nodes.size()) - 1;
  return JsonConstraint(std::make_shared<const std::vector<Node>>(std::move(nodes)), root);
}

Result<int> JsonConstraint::add_schema(std::vector<Node>& nodes, const Json& s, const std::string& at) {
  const auto bad = [&](const std::string& m) { return invalid_argument("json_schema: " + at + ": " + m); };
  if (nodes.size() > 4096) return bad("too many nodes (at most 4096)");
  if (!s.is_object()) return bad("a schema must be an object");
  static const char* kKnown[] = {"type", "properties", "items", "minItems", "maxItems", "maxLength", "enum", "const",
                                 "title", "description", "$schema", "additionalProperties", "required", "default"};
  for (const auto& [key, value] : s.items()) {
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      return bad("'" + key + "' is not supported (supported: type, properties, items, minItems, maxItems, maxLength, "
                             "enum, const)");
    }
  }
  Node n;
  if (s.contains("enum") || s.contains("const")) {
    const Json values = s.contains("const") ? Json::array({s["const"]}) : s["enum"];
    if (!values.is_array() || values.empty() || values.size() > 64) return bad("'enum' must list 1 to 64 values");
    n.kind = Node::kLiterals;
    for (const Json& v : values) {
      if (v.is_structured()) return bad("'enum' and 'const' values must be strings, numbers, booleans or null");
      const std::string text = v.dump();
      if (v.is_string() && text.find('\\') != std::string::npos) return bad("enum strings with escapes are not supported");
      n.literals.push_back(text);
    }
  } else {
    if (!s.contains("type") || !s["type"].is_string()) return bad("'type' must be one type name (a list of types is not supported)");
    const std::string type = s["type"];
    const auto count = [&](const char* key, int dflt, int& out) -> Status {
      if (!s.contains(key)) {
        out = dflt;
        return Status::ok();
      }
      if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0 || s[key].get<int64_t>() > INT_MAX) {
        return bad(std::string("'") + key + "' must be a non-negative integer");
      }
      out = s[key].get<int>();
      return Status::ok();
    };
    if (type == "object") {
      if (!s.contains("properties")) {
        n.kind = Node::kFreeObject;
      } else {
        if (!s["properties"].is_object()) return bad("'properties' must be an object");
        n.kind = Node::kObject;
        for (const auto& [name, sub] : s["properties"].items()) {
          if (Json(name).dump().find('\\') != std::string::npos) return bad("property names with escapes are not supported");
          LEOAM_ASSIGN_OR_RETURN(const int child, add_schema(nodes, sub, at + ".properties." + name));
          n.keys.push_back((n.keys.empty() ? "" : ",") + Json(name).dump() + ":");
          n.children.push_back(child);
        }
      }
    } else if (type == "array") {
      n.kind = Node::kArray;
      int items = kAnyNode;
      if (s.contains("items")) {
        LEOAM_ASSIGN_OR_RETURN(items, add_schema(nodes, s["items"], at + ".items"));
      }
      n.children = {items};
      LEOAM_RETURN_IF_ERROR(count("minItems", 0, n.min_items));
      LEOAM_RETURN_IF_ERROR(count("maxItems", INT_MAX, n.max_items));
      if (n.min_items > n.max_items) return bad("'minItems' exceeds 'maxItems'");
      if (n.min_items > 1024) return bad("'minItems' over 1024");
    } else if (type == "string") {
      n.kind = Node::kString;
      LEOAM_RETURN_IF_ERROR(count("maxLength", INT_MAX, n.max_length));
    } else if (type == "integer" || type == "number") {
      n.kind = type == "integer" ? Node::kInteger : Node::kNumber;
    } else if (type == "boolean" || type == "null") {
      n.kind = Node::kLiterals;
      n.literals = type == "null" ? std::vector<std::string>{"null"} : std::vector<std::string>{"true", "false"};
    } else {
      return bad("unknown type '" + type + "'");
    }
  }
  // The fewest characters of a whole value.
  switch (n.kind) {
    case Node::kObject: {
      n.rest.assign(n.keys.size() + 1, 0);
      for (size_t i = n.keys.size(); i-- > 0;) {
        n.rest[i] = n.rest[i + 1] + static_cast<int64_t>(n.keys[i].size()) + nodes[n.children[i]].min_chars;
      }
      n.min_chars = 2 + n.rest[0];
      break;
    }
    case Node::kFreeObject:
    case Node::kString: n.min_chars = 2; break;
    case Node::kArray:
      n.min_chars = 2 + n.min_items * nodes[n.children[0]].min_chars + std::max(0, n.min_items - 1);
      break;
    case Node::kInteger:
    case Node::kNumber: n.min_chars = 1; break;
    case Node::kLiterals: {
      n.min_chars = INT64_MAX;
      for (const std::string& l : n.literals) n.min_chars = std::min<int64_t>(n.min_chars, static_cast<int64_t>(l.size()));
      break;
    }
    case Node::kAny: n.min_chars = 1; break;
    case Node::kSwitch: break;  // tool_call() sets it
  }
  nodes.push_back(std::move(n));
  return static_cast<int>(nodes.size()) - 1;
}

void JsonConstraint::push(int node) {
  Frame f;
  f.node = node;
  const Node& n = (*nodes_)[node];
  if (n.kind == Node::kLiterals) f.alive = n.literals.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.literals.size()) - 1;
  stack_.push_back(f);
}

void JsonConstraint::child_done(const Frame& child) {
  if (stack_.empty()) return;
  Frame& f = stack_.back();
  const Node& n = (*nodes_)[f.node];
  switch (n.kind) {
    case Node::kObject:
      // A literal's choice, for a kSwitch property after it: the one candidate left.
      if ((*nodes_)[child.node].kind == Node::kLiterals) f.alive = child.alive;
      ++f.count;
      f.pos = 0;
      f.phase = f.count == static_cast<int>(n.keys.size()) ? 3 : 1;
      break;
    case Node::kFreeObject:
      f.phase = f.phase == 2 ? 5 : 6;  // a key, or a value, done
      if (f.phase == 6) ++f.count;
      break;
    case Node::kArray:
      ++f.count;
      f.phase = 6;
      break;
    default: break;
  }
}

JsonConstraint::Step JsonConstraint::step(Frame& f, unsigned char c) {
  const Node& n = (*nodes_)[f.node];
  switch (n.kind) {
    case Node::kSwitch: return Step::kReject;  // never a frame: chosen() resolves it before a push
    case Node::kAny: {
      int target = -1;
      if (c == '{') target = kFreeObjectNode;
      else if (c == '[') target = kAnyArrayNode;
      else if (c == '"') target = kFreeStringNode;
      else if (c == '-' || is_digit(c)) target = kNumberNode;
      else if (c == 't' || c == 'f' || c == 'n') target = kBoolNullNode;
      if (target < 0) return Step::kReject;
      if ((target == kFreeObjectNode || target == kAnyArrayNode) && stack_.size() > static_cast<size_t>(kMaxDepth)) {
        return Step::kReject;
      }
      f = Frame{};
      f.node = target;
      if (target == kBoolNullNode) f.alive = 7;
      return step(f, c);
    }
    case Node::kObject:
      if (f.phase == 0) {
        if (c != '{') return Step::kReject;
        f.phase = n.keys.empty() ? 3 : 1;
        return Step::kConsumed;
      }
      if (f.phase == 3) return c == '}' ? Step::kPopAndRefeed : Step::kReject;  // see feed_char: '}' closes
      if (f.phase == 1) {
        const std::string& key = n.keys[f.count];
        if (static_cast<unsigned char>(key[f.pos]) != c) return Step::kReject;
        if (++f.pos == static_cast<int>(key.size())) {
          f.phase = 2;
          push(chosen(n.children[f.count], f.alive));  // invalidates f
        }
        return Step::kConsumed;
      }
      return Step::kReject;
    case Node::kFreeObject:
      switch (f.phase) {
        case 0:
          if (c != '{') return Step::kReject;
          f.phase = 1;
          return Step::kConsumed;
        case 1:
        case 4:
          if (c == '}' && f.phase == 1) return Step::kPopAndRefeed;
          if (c != '"') return Step::kReject;
          f.phase = 2;
          push(kFreeStringNode);
          return step(stack_.back(), c);
        case 5:
          if (c != ':') return Step::kReject;
          f.phase = 3;
          push(kAnyNode);
          return Step::kConsumed;
        case 6:
          if (c == ',') {
            f.phase = 4;
            return Step::kConsumed;
          }
          return c == '}' ? Step::kPopAndRefeed : Step::kReject;
        default: return Step::kReject;
      }
    case Node::kArray:
      switch (f.phase) {
        case 0:
          if (c != '[') return Step::kReject;
          f.phase = 1;
          return Step::kConsumed;
        case 1:
        case 3: {
          if (c == ']' && f.phase == 1) return n.min_items == 0 ? Step::kPopAndRefeed : Step::kReject;
          if (f.count >= n.max_items) return Step::kReject;
          f.phase = 2;
          push(n.children[0]);
          return step(stack_.back(), c);
        }
        case 6:
          if (c == ',') {
            if (f.count >= n.max_items) return Step::kReject;
            f.phase = 3;
            return Step::kConsumed;
          }
          if (c == ']') return f.count >= n.min_items ? Step::kPopAndRefeed : Step::kReject;
          return Step::kReject;
        default: return Step::kReject;
      }
    case Node::kString:
      if (f.phase == 0) {
        if (c != '"') return Step::kReject;
        f.phase = 1;
        return Step::kConsumed;
      }
      // UTF-8, whole: f.pos counts the continuation bytes the last lead byte still wants.
      if (f.pos > 0) {
        if ((c & 0xC0) != 0x80) return Step::kReject;
        --f.pos;
        return Step::kConsumed;
      }
      if (c == '"') return Step::kPopAndRefeed;
      if (c == '\\' || c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xC2) || c > 0xF4) return Step::kReject;
      f.pos = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : 0;
      if (++f.count > n.max_length) return Step::kReject;
      return Step::kConsumed;
    case Node::kInteger:
    case Node::kNumber: {
      const bool fraction = n.kind == Node::kNumber;
      switch (f.phase) {
        case 0:
        case 1:
          if (c == '-' && f.phase == 0) {
            f.phase = 1;
            return Step::kConsumed;
          }
          if (!is_digit(c)) return Step::kReject;
          f.phase = c == '0' ? 3 : 2;
          f.count = 1;
          return Step::kConsumed;
        case 2:
        case 5:
          if (is_digit(c)) return ++f.count > kMaxDigits ? Step::kReject : Step::kConsumed;
          if (c == '.' && fraction && f.phase == 2) {
            f.phase = 4;
            return Step::kConsumed;
          }
          return Step::kPopAndRefeed;
        case 3:
          if (is_digit(c)) return Step::kReject;
          if (c == '.' && fraction) {
            f.phase = 4;
            return Step::kConsumed;
          }
          return Step::kPopAndRefeed;
        case 4:
          if (!is_digit(c)) return Step::kReject;
          f.phase = 5;
          f.count = 1;
          return Step::kConsumed;
        default: return Step::kReject;
      }
    }
    case Node::kLiterals: {
      uint64_t next = 0;
      bool ended = false;  // a candidate is whole before c
      for (size_t i = 0; i < n.literals.size(); ++i) {
        if ((f.alive >> i & 1) == 0) continue;
        const std::string& l = n.literals[i];
        if (f.pos < static_cast<int>(l.size()) && static_cast<unsigned char>(l[f.pos]) == c) next |= uint64_t{1} << i;
        if (f.pos == static_cast<int>(l.size())) ended = true;
      }
      if (next == 0) return ended ? Step::kPopAndRefeed : Step::kReject;
      f.alive = next;
      ++f.pos;
      return Step::kConsumed;
    }
  }
  return Step::kReject;
}

bool JsonConstraint::feed_char(unsigned char c) {
  for (;;) {
    if (stack_.empty()) return false;
    const Node::Kind kind = (*nodes_)[stack_.back().node].kind;
    const int phase = stack_.back().phase;
    const Step s = step(stack_.back(), c);
    if (s == Step::kConsumed) return true;
    if (s == Step::kReject) return false;
    // kPopAndRefeed: the top frame is whole. A closing character ('}', ']', '"') is its own and
    // consumed with it; a number or literal ended before c, which goes to its parent.
    const bool closes = (kind == Node::kObject || kind == Node::kFreeObject || kind == Node::kArray ||
                         (kind == Node::kString && phase == 1));
    const Frame child = stack_.back();
    stack_.pop_back();
    child_done(child);
    if (closes) return true;
  }
}

bool JsonConstraint::feed(std::string_view text) {
  for (char c : text) {
    if (!feed_char(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool JsonConstraint::complete() const {
  if (stack_.empty()) return true;
  if (stack_.size() != 1) return false;
  return frame_min(stack_.back()) == 0;  // a number or literal that may end here, at the top
}

int64_t JsonConstraint::fresh_min(int node) const { return (*nodes_)[node].min_chars; }

int JsonConstraint::chosen(int node, uint64_t choice) const {
  const Node& n = (*nodes_)[node];
  if (n.kind != Node::kSwitch || choice == 0) return node;
  return n.children[static_cast<size_t>(std::countr_zero(choice)) % n.children.size()];
}

int64_t JsonConstraint::frame_min(const Frame& f) const {
  const Node& n = (*nodes_)[f.node];
  switch (n.kind) {
    case Node::kSwitch: return n.min_chars;
    case Node::kAny: return 1;
    case Node::kObject:
      switch (f.phase) {
        case 0: return n.min_chars;
        case 1:
          return static_cast<int64_t>(n.keys[f.count].size()) - f.pos + fresh_min(chosen(n.children[f.count], f.alive)) +
                 n.rest[f.count + 1] + 1;
        case 2: return n.rest[f.count + 1] + 1;
        default: return 1;
      }
    case Node::kFreeObject:
      switch (f.phase) {
        case 0: return 2;
        case 1: return 1;
        case 2:
        case 5: return 3;  // ':', a one-character value, '}'
        case 4: return 5;  // '""', ':', a value, '}'
        default: return 1;
      }
    case Node::kArray: {
      const int64_t item = fresh_min(n.children[0]);
      const auto more = [&](int have) { return std::max<int64_t>(0, n.min_items - have) * (1 + item); };
      switch (f.phase) {
        case 0: return n.min_chars;
        case 1: return n.min_items == 0 ? 1 : n.min_items * item + (n.min_items - 1) + 1;
        case 2: return more(f.count + 1) + 1;
        case 3: return item + more(f.count + 1) + 1;
        default: return more(f.count) + 1;
      }
    }
    case Node::kString: return f.phase == 0 ? 2 : 1 + f.pos;
    case Node::kInteger:
    case Node::kNumber: return f.phase == 0 || f.phase == 1 || f.phase == 4 ? 1 : 0;
    case Node::kLiterals: {
      int64_t best = INT64_MAX;
      for (size_t i = 0; i < n.literals.size(); ++i) {
        if ((f.alive >> i & 1) != 0) best = std::min<int64_t>(best, static_cast<int64_t>(n.literals[i].size()) - f.pos);
      }
      return best;
    }
  }
  return 0;
}

int64_t JsonConstraint::min_chars_to_finish() const {
  int64_t total = 0;
  for (const Frame& f : stack_) total += frame_min(f);
  return total;
}

bool JsonConstraint::allows(std::string_view text, int64_t chars_left) const {
  JsonConstraint copy = *this;
  return copy.feed(text) && copy.min_chars_to_finish() <= chars_left;
}

}  // namespace leoam
