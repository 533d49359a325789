#include "chat/template_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/python_text.h"

namespace leoam::chat {

namespace {

template <typename Json>
Value from_json(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::integer(static_cast<int64_t>(u));
      }
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictData dict;
      dict.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) dict.entries.emplace_back(it.key(), from_json(it.value()));
      return Value::dict(std::move(dict));
    }
    default:  // binary and discarded values have no Python counterpart here
      return Value::none();
  }
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const uint32_t cp = py::decode_code_point(s, i, &n);
    char buf[16];
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
      if (cp >= 0x10000) {  // a surrogate pair
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      out += buf;
    } else {
      out += s.substr(i, n);
    }
  }
  out += '"';
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {
    item_separator_ = options.item_separator ? *options.item_separator : (options.indent ? "," : ", ");
  }

  Status write(const Value& v, int depth) {
    switch (v.kind()) {
      case ValueKind::kNone:
        out_ += "null";
        return Status::ok();
      case ValueKind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return Status::ok();
      case ValueKind::kInt:
        out_ += std::to_string(v.as_int());
        return Status::ok();
      case ValueKind::kFloat: {
        const double d = v.as_double();
        if (std::isnan(d)) out_ += "NaN";
        else if (std::isinf(d)) out_ += d < 0 ? "-Infinity" : "Infinity";
        else out_ += py::format_float(d);
        return Status::ok();
      }
      case ValueKind::kString:
        append_json_string(out_, v.as_string(), options_.ensure_ascii);
        return Status::ok();
      case ValueKind::kList:
        return write_list(v.as_list(), depth);
      case ValueKind::kDict:
        if (!v.is_namespace()) return write_dict(v.as_dict(), depth);
        break;
      default:
        break;
    }
    return type_error("Object of type " + type_name(v) + " is not JSON serializable");
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int depth) {
    if (!options_.indent) return;
    out_ += '\n';
    for (int i = 0; i < depth; ++i) out_ += *options_.indent;
  }

  Status write_list(const ListData& list, int depth) {
    if (list.items.empty()) {
      out_ += "[]";
      return Status::ok();
    }
    out_ += '[';
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      newline(depth + 1);
      LEOAM_RETURN_IF_ERROR(write(list.items[i], depth + 1));
    }
    newline(depth);
    out_ += ']';
    return Status::ok();
  }

  Status write_dict(const DictData& dict, int depth) {
    if (dict.entries.empty()) {
      out_ += "{}";
      return Status::ok();
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& entry : dict.entries) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      newline(depth + 1);
      append_json_string(out_, entries[i]->first, options_.ensure_ascii);
      out_ += options_.key_separator;
      LEOAM_RETURN_IF_ERROR(write(entries[i]->second, depth + 1));
    }
    newline(depth);
    out_ += '}';
    return Status::ok();
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string out_;
};

}  // namespace

Value value_from_json(const nlohmann::json& j) { return from_json(j); }
Value value_from_json(const nlohmann::ordered_json& j) { return from_json(j); }

Result<std::string> dump_json(const Value& v, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  LEOAM_RETURN_IF_ERROR(writer.write(v, 0));
  return writer.take();
}

}  // namespace leoam::chat
