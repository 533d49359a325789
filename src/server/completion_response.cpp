#include "server/completion_response.h"

#include <chrono>
#include <utility>

#include "kv/tier.h"
#include "server/tool_call_parser.h"
#include "tokenizer/tokenizer.h"

namespace leoam::server {
namespace {

using json = nlohmann::json;

json token_bytes(const std::string& piece) {
  json b = json::array();
  for (unsigned char c : piece) b.push_back(c);
  return b;
}

// A token's piece as a JSON string: a piece that ends inside a UTF-8 sequence (a byte token) is
// not valid text, so its bad bytes become U+FFFD (the chat shape's "bytes" keeps them exact).
std::string printable(const std::string& piece) {
  return json::parse(json(piece).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

}  // namespace

CompletionResponse::CompletionResponse(const CompletionRequest& request, std::string id, std::string model,
                                       const Tokenizer& tokenizer)
    : endpoint_(request.endpoint),
      logprobs_(request.n_logprobs >= 0),
      tool_call_(request.tool_call),
      tool_names_(request.tool_names),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()),
      tokenizer_(tokenizer),
      logprobs_json_(empty_logprobs()) {}

json CompletionResponse::empty_logprobs() const {
  if (!logprobs_) return nullptr;
  if (endpoint_ == Endpoint::kChat) return {{"content", json::array()}};
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

json CompletionResponse::tool_calls(bool delta) const {
  std::vector<ParsedToolCall> calls;
  if (tool_call_) {  // sampled as one call object
    const json call = json::parse(text_, nullptr, false);
    if (!call.is_object() || !call.contains("name") || !call.contains("arguments")) return nullptr;
    calls.push_back({call["name"], call["arguments"]});
  } else if (!tool_names_.empty()) {  // tool_choice auto: the calls the text makes, if any
    std::optional<std::vector<ParsedToolCall>> parsed = parse_tool_calls(text_, tool_names_);
    if (!parsed) return nullptr;
    calls = std::move(*parsed);
  } else {
    return nullptr;
  }
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", "call_" + id_.substr(id_.find('-') + 1) + "_" + std::to_string(i)},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments.dump()}}}};
    if (delta) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

json CompletionResponse::envelope(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

json CompletionResponse::usage(const GenerationEvent& last) const {
  return {{"prompt_tokens", last.n_prompt_tokens},
          {"completion_tokens", last.n_generated},
          {"total_tokens", last.n_prompt_tokens + last.n_generated},
          {"prompt_tokens_details", {{"cached_tokens", last.n_reused_tokens}}}};
}

json CompletionResponse::engine_figures(const GenerationEvent& last) {
  json read = json::object();
  for (int t = 0; t < kNumTiers; ++t) read[tier_name(static_cast<Tier>(t))] = last.bytes_read[t];
  return {{"queued_ms", last.queued_ms},        {"prefill_ms", last.prefill_ms},
          {"decode_ms", last.decode_ms},        {"kv_attended", last.attended_share},
          {"kv_bytes_read", read}};
}

void CompletionResponse::append_logprobs(const GenerationEvent& event, json& into) {
  if (!logprobs_) return;
  for (const GeneratedToken& t : event.tokens) {
    const std::string piece = tokenizer_.token_to_piece(t.token);
    if (endpoint_ == Endpoint::kChat) {
      json top = json::array();
      for (const TokenLogprob& a : t.top) {
        const std::string p = tokenizer_.token_to_piece(a.token);
        top.push_back({{"token", printable(p)}, {"logprob", a.logprob}, {"bytes", token_bytes(p)}});
      }
      into["content"].push_back(
          {{"token", printable(piece)}, {"logprob", t.logprob}, {"bytes", token_bytes(piece)}, {"top_logprobs", top}});
    } else {
      json top = json::object();
      for (const TokenLogprob& a : t.top) top[printable(tokenizer_.token_to_piece(a.token))] = a.logprob;
      into["tokens"].push_back(printable(piece));
      into["token_logprobs"].push_back(t.logprob);
      into["top_logprobs"].push_back(top);
      into["text_offset"].push_back(text_offset_);
      text_offset_ += static_cast<int64_t>(piece.size());
    }
  }
}

void CompletionResponse::add(const GenerationEvent& event) {
  text_ += event.text;
  append_logprobs(event, logprobs_json_);
}

json CompletionResponse::body(const GenerationEvent& last) const {
  const char* finish = finish_reason_name(last.finish);
  json choice;
  json out;
  if (endpoint_ == Endpoint::kChat) {
    out = envelope("chat.completion");
    json message = {{"role", "assistant"}, {"content", text_}};
    if (const json calls = tool_calls(false); !calls.is_null()) {
      message["content"] = nullptr;
      message["tool_calls"] = calls;
      finish = "tool_calls";
    }
    choice = {{"index", 0}, {"message", message}, {"logprobs", logprobs_json_}, {"finish_reason", finish}};
  } else {
    out = envelope("text_completion");
    choice = {{"index", 0}, {"text", text_}, {"logprobs", logprobs_json_}, {"finish_reason", finish}};
  }
  out["choices"] = json::array({choice});
  out["usage"] = usage(last);
  out["leoam"] = engine_figures(last);
  return out;
}

json CompletionResponse::chunk(const GenerationEvent& event) {
  if (tool_call_ || !tool_names_.empty()) {  // a call is sent whole, in the last chunk (auto: text too)
    text_ += event.text;
    return nullptr;
  }
  json lp = empty_logprobs();
  append_logprobs(event, lp);
  json out;
  json choice;
  if (endpoint_ == Endpoint::kChat) {
    out = envelope("chat.completion.chunk");
    json delta = {{"content", event.text}};
    if (!sent_role_) delta["role"] = "assistant";
    sent_role_ = true;
    choice = {{"index", 0}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", nullptr}};
  } else {
    out = envelope("text_completion");
    choice = {{"index", 0}, {"text", event.text}, {"logprobs", lp}, {"finish_reason", nullptr}};
  }
  out["choices"] = json::array({choice});
  return out;
}

json CompletionResponse::final_chunk(const GenerationEvent& last) const {
  json out;
  json choice;
  const char* finish = finish_reason_name(last.finish);
  if (endpoint_ == Endpoint::kChat) {
    out = envelope("chat.completion.chunk");
    json delta = json::object();
    if (!sent_role_) delta["role"] = "assistant";
    if (const json calls = tool_calls(true); !calls.is_null()) {
      delta["tool_calls"] = calls;
      finish = "tool_calls";
    } else if (tool_call_ || !tool_names_.empty()) {
      delta["content"] = text_;  // no call: the text, held back until now
    }
    choice = {{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}};
  } else {
    out = envelope("text_completion");
    choice = {{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish}};
  }
  out["choices"] = json::array({choice});
  out["leoam"] = engine_figures(last);
  return out;
}

json CompletionResponse::usage_chunk(const GenerationEvent& last) const {
  json out = envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage(last);
  return out;
}

}  // namespace leoam::server
