#include "server/completion_request.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace leoam::server {
namespace {

using json = nlohmann::json;

// A field's check failed: the request is refused with this error.
struct Refused {
  ApiError error;
};

[[noreturn]] void refuse(std::string message, std::string param) { throw Refused{bad_request(std::move(message), std::move(param))}; }

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

// The field `name` of `body` if present and not null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number_in(const json& body, const char* name, double lo, double hi, double fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number()) refuse(std::string("'") + name + "' must be a number, not " + type_name(*v), name);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    const auto g = [](double d) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", d);
      return std::string(buf);
    };
    refuse(std::string("'") + name + "' must be in [" + g(lo) + ", " + g(hi) + "], got " + v->dump(), name);
  }
  return x;
}

int64_t integer_in(const json& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) refuse(std::string("'") + name + "' must be an integer, not " + v->dump(), name);
  if (v->is_number_unsigned() ? v->get<uint64_t>() > static_cast<uint64_t>(hi) : (v->get<int64_t>() < lo || v->get<int64_t>() > hi)) {
    refuse(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v->dump(), name);
  }
  return v->get<int64_t>();
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) refuse(std::string("'") + name + "' must be a boolean, not " + type_name(*v), name);
  return v->get<bool>();
}

void optional_string(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v != nullptr && !v->is_string()) refuse(std::string("'") + name + "' must be a string, not " + type_name(*v), name);
}

std::vector<std::string> stop_strings(const json& body) {
  const json* v = field(body, "stop");
  if (v == nullptr) return {};
  if (v->is_string()) return {v->get<std::string>()};
  constexpr size_t kMaxStops = 16;
  if (!v->is_array() || v->size() > kMaxStops) refuse("'stop' must be a string or an array of at most 16 strings", "stop");
  std::vector<std::string> stops;
  for (const json& s : *v) {
    if (!s.is_string()) refuse("'stop' must hold strings only, not " + std::string(type_name(s)), "stop");
    stops.push_back(s.get<std::string>());
  }
  return stops;
}

void parse_prompt(const json& body, CompletionRequest& r) {
  const json* v = field(body, "prompt");
  if (v == nullptr) refuse("'prompt' is required", "prompt");
  if (v->is_string()) {
    r.prompt = v->get<std::string>();
    return;
  }
  if (v->is_array() && v->size() == 1 && (*v)[0].is_string()) {
    r.prompt = (*v)[0].get<std::string>();
    return;
  }
  if (v->is_array() && !v->empty() && (*v)[0].is_number_integer()) {
    for (const json& t : *v) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        refuse("'prompt' as token ids must hold non-negative integers only", "prompt");
      }
      r.prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return;
  }
  refuse("'prompt' must be a string, an array of one string, or an array of token ids (one prompt a request)", "prompt");
}

void parse_messages(const json& body, CompletionRequest& r) {
  const json* v = field(body, "messages");
  if (v == nullptr) refuse("'messages' is required", "messages");
  if (!v->is_array() || v->empty()) refuse("'messages' must be a non-empty array", "messages");
  r.messages = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) refuse("'" + at + "' must be an object", "messages");
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) refuse("'" + at + ".role' must be a string", "messages");
    json out = m;
    const json* content = field(m, "content");
    if (content == nullptr) {
      // An assistant turn that only called tools keeps its null content, as templates expect it.
      if (!(m.contains("tool_calls") && m.contains("content"))) out["content"] = "";
    } else if (content->is_array()) {  // content parts: their texts, joined
      std::string text;
      for (const json& part : *content) {
        const json* t = part.is_object() ? field(part, "text") : nullptr;
        if (t == nullptr || !t->is_string() || part.value("type", "") != "text") {
          refuse("'" + at + ".content' parts must be {\"type\": \"text\", \"text\": ...}: only text is supported", "messages");
        }
        text += t->get<std::string>();
      }
      out["content"] = text;
    } else if (!content->is_string()) {
      refuse("'" + at + ".content' must be a string or an array of text parts, not " + type_name(*content), "messages");
    }
    r.messages.push_back(std::move(out));
  }
}

// Fields that would change what the answer must be, which this server cannot honour: refused by
// name rather than ignored (a client would believe its tools or its JSON schema were used).
void refuse_unsupported(const json& body) {
  for (const char* name : {"functions", "function_call", "audio", "prediction", "suffix"}) {
    if (const json* f = field(body, name); f != nullptr && !f->is_null()) {
      refuse(std::string("'") + name + "' is not supported by this server", name);
    }
  }
  if (const json* f = field(body, "logit_bias"); f != nullptr && !f->is_null() && !(f->is_object() && f->empty())) {
    refuse("'logit_bias' is not supported by this server", "logit_bias");
  }
  if (const json* f = field(body, "modalities"); f != nullptr && !f->is_null() && *f != json::array({"text"})) {
    refuse("'modalities' other than [\"text\"] are not supported", "modalities");
  }
  if (const json* f = field(body, "best_of"); f != nullptr && !f->is_null() && *f != 1) {
    refuse("'best_of' must be 1", "best_of");
  }
}

// response_format: text (none), json_object (any JSON object), or json_schema (a value of
// json_schema.schema, in json_constraint.h's subset): the constraint the answer is sampled under.
std::optional<JsonConstraint> response_format(const json& body) {
  const json* f = field(body, "response_format");
  if (f == nullptr || f->is_null()) return std::nullopt;
  const json* type = f->is_object() ? field(*f, "type") : nullptr;
  if (type == nullptr || !type->is_string()) refuse("'response_format.type' must be a string", "response_format");
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") return JsonConstraint::any_object();
  if (*type != "json_schema") {
    refuse("'response_format.type' must be text, json_object or json_schema", "response_format");
  }
  const json* spec = field(*f, "json_schema");
  const json* schema = spec != nullptr && spec->is_object() ? field(*spec, "schema") : nullptr;
  if (schema == nullptr) refuse("'response_format.json_schema.schema' is missing", "response_format");
  Result<JsonConstraint> c = JsonConstraint::from_schema(*schema);
  if (!c.is_ok()) refuse("'response_format': " + c.status().message(), "response_format");
  return std::move(c).value();
}

// tools and tool_choice (chat): the tools are rendered into the prompt (r.tools); "required" or a
// named function make the answer a call of one of the functions, sampled under its parameters'
// schema; "auto" (the default with tools) lets the model answer text or call them in its
// template's syntax (r.tool_names: tool_call_parser.h); "none" leaves the tools out.
std::optional<JsonConstraint> tool_call(const json& body, Endpoint endpoint, CompletionRequest& r) {
  const json* tools = field(body, "tools");
  const json* choice = field(body, "tool_choice");
  if (tools == nullptr || tools->is_null()) {
    if (choice != nullptr && !choice->is_null() && *choice != "none") refuse("'tool_choice' needs 'tools'", "tool_choice");
    return std::nullopt;
  }
  if (endpoint != Endpoint::kChat) refuse("'tools' are for /v1/chat/completions", "tools");
  if (!tools->is_array() || tools->empty()) refuse("'tools' must be a non-empty array", "tools");
  std::vector<std::pair<std::string, json>> functions;
  for (const json& t : *tools) {
    const json* fn = t.is_object() && t.value("type", "") == "function" ? field(t, "function") : nullptr;
    const json* name = fn != nullptr && fn->is_object() ? field(*fn, "name") : nullptr;
    if (name == nullptr || !name->is_string()) {
      refuse("each of 'tools' must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}", "tools");
    }
    const json* params = field(*fn, "parameters");
    functions.emplace_back(name->get<std::string>(),
                           params != nullptr && !params->is_null() ? *params : json{{"type", "object"}, {"properties", json::object()}});
  }
  if (choice != nullptr && *choice == "none") return std::nullopt;
  r.tools = *tools;
  if (choice == nullptr || choice->is_null() || *choice == "auto") {
    for (const auto& f : functions) r.tool_names.push_back(f.first);
    return std::nullopt;
  }
  if (choice->is_object()) {
    const json* fn = field(*choice, "function");
    const json* name = fn != nullptr && fn->is_object() ? field(*fn, "name") : nullptr;
    if (name == nullptr || !name->is_string()) refuse("'tool_choice.function.name' must be a string", "tool_choice");
    std::erase_if(functions, [&](const auto& f) { return f.first != name->get<std::string>(); });
    if (functions.empty()) refuse("'tool_choice' names no function of 'tools'", "tool_choice");
  } else if (*choice != "required") {
    refuse("'tool_choice' must be \"none\", \"auto\", \"required\" or a function", "tool_choice");
  }
  Result<JsonConstraint> c = JsonConstraint::tool_call(functions);
  if (!c.is_ok()) refuse("'tools': " + c.status().message(), "tools");
  return std::move(c).value();
}

CompletionRequest parse(std::string_view text, Endpoint endpoint, const RequestDefaults& defaults) {
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) refuse("the request body is not valid JSON", "");
  if (!body.is_object()) refuse("the request body must be a JSON object", "");
  CompletionRequest r;
  r.endpoint = endpoint;
  if (endpoint == Endpoint::kCompletions) {
    parse_prompt(body, r);
    r.n_logprobs = static_cast<int>(integer_in(body, "logprobs", 0, 20, -1));
    if (boolean(body, "echo", false)) refuse("'echo' is not supported", "echo");
  } else {
    parse_messages(body, r);
    const bool logprobs = boolean(body, "logprobs", false);
    const auto top = static_cast<int>(integer_in(body, "top_logprobs", 0, 20, 0));
    if (field(body, "top_logprobs") != nullptr && !logprobs) refuse("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    r.n_logprobs = logprobs ? top : -1;
  }
  if (const json* model = field(body, "model"); model != nullptr && !model->is_null()) {
    if (!model->is_string()) refuse(std::string("'model' must be a string, not ") + type_name(*model), "model");
    r.model = model->get<std::string>();
  }
  optional_string(body, "user");
  refuse_unsupported(body);
  r.json = response_format(body);
  if (std::optional<JsonConstraint> call = tool_call(body, endpoint, r)) {
    if (r.json) refuse("'response_format' and a required tool call together are not supported", "response_format");
    r.json = std::move(call);
    r.tool_call = true;
  }
  if (r.json && !r.tool_names.empty()) {
    refuse("'response_format' and tools the model may call (tool_choice auto) together are not supported", "response_format");
  }
  const char* max_name = endpoint == Endpoint::kChat && field(body, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  r.max_tokens = static_cast<int>(integer_in(body, max_name, 0, defaults.max_tokens_limit, defaults.max_tokens));
  r.sampler = defaults.sampler;
  r.sampler.temperature = static_cast<float>(number_in(body, "temperature", 0.0, 2.0, defaults.sampler.temperature));
  r.sampler.top_p = static_cast<float>(number_in(body, "top_p", 0.0, 1.0, defaults.sampler.top_p));
  if (r.sampler.top_p <= 0.0f) refuse("'top_p' must be greater than 0", "top_p");
  r.sampler.top_k = static_cast<int>(integer_in(body, "top_k", 0, std::numeric_limits<int32_t>::max(), defaults.sampler.top_k));
  r.sampler.min_p = static_cast<float>(number_in(body, "min_p", 0.0, 1.0, defaults.sampler.min_p));
  r.sampler.repeat_penalty = static_cast<float>(number_in(body, "repeat_penalty", 0.0, 10.0, defaults.sampler.repeat_penalty));
  if (r.sampler.repeat_penalty <= 0.0f) refuse("'repeat_penalty' must be greater than 0", "repeat_penalty");
  if (field(body, "seed") != nullptr) {
    r.seed = static_cast<uint64_t>(integer_in(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0));
  }
  r.stop = stop_strings(body);
  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options"); so != nullptr) {
    if (!so->is_object()) refuse("'stream_options' must be an object", "stream_options");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  if (integer_in(body, "n", 1, 1, 1) != 1) refuse("'n' must be 1", "n");
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    if (number_in(body, penalty, -2.0, 2.0, 0.0) != 0.0) {
      refuse(std::string("'") + penalty + "' is not supported (use 'repeat_penalty')", penalty);
    }
  }
  return r;
}

}  // namespace

ParsedRequest parse_completion_request(std::string_view body, Endpoint endpoint, const RequestDefaults& defaults) {
  try {
    return {parse(body, endpoint, defaults), {}};
  } catch (const Refused& refused) {
    return {std::nullopt, refused.error};
  }
}

}  // namespace leoam::server
