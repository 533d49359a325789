// The JSON that answers a completion or chat request, whole or as stream chunks (OpenAI's
// shapes: "text_completion", "chat.completion" and "chat.completion.chunk"), built from the
// scheduler's events.
//
//   whole:  add(event) for every event, then body(last event)
//   stream: chunk(event) for each event that carries text or tokens, then final_chunk(last event)
//           (finish_reason), then with stream_options.include_usage usage_chunk(last event) (no
//           choices: usage once, as OpenAI sends it), then "data: [DONE]"
// The last answer also carries "leoam": {queued_ms, prefill_ms, decode_ms, kv_attended (the
// share of visible positions its decode attended), kv_bytes_read {device, host, disk}}.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/batch_scheduler.h"
#include "server/completion_request.h"

namespace leoam {
class Tokenizer;
}

namespace leoam::server {

class CompletionResponse {
 public:
  // `id` names the response ("cmpl-..." or "chatcmpl-..."), `model` the model it came from.
  CompletionResponse(const CompletionRequest& request, std::string id, std::string model, const Tokenizer& tokenizer);

  void add(const GenerationEvent& event);
  nlohmann::json body(const GenerationEvent& last) const;

  nlohmann::json chunk(const GenerationEvent& event);
  nlohmann::json final_chunk(const GenerationEvent& last) const;
  nlohmann::json usage_chunk(const GenerationEvent& last) const;

 private:
  nlohmann::json envelope(const char* object) const;
  nlohmann::json usage(const GenerationEvent& last) const;
  // leoam's own figures of the request: times, the share of KV attended, bytes read per tier.
  static nlohmann::json engine_figures(const GenerationEvent& last);
  // The logprobs of `event`'s tokens in the endpoint's shape, appended to `into`.
  void append_logprobs(const GenerationEvent& event, nlohmann::json& into);
  nlohmann::json empty_logprobs() const;
  // A tool call's answer: the call the text holds, in OpenAI's tool_calls shape (with an index in
  // a stream's delta); null when the text is not a whole call (it ran out of tokens).
  nlohmann::json tool_calls(bool delta) const;

  Endpoint endpoint_;
  bool logprobs_ = false;
  bool tool_call_ = false;
  std::vector<std::string> tool_names_;  // tool_choice auto: the functions the text may call
  std::string id_;
  std::string model_;
  int64_t created_ = 0;
  const Tokenizer& tokenizer_;
  std::string text_;          // whole: the text so far
  nlohmann::json logprobs_json_;
  int64_t text_offset_ = 0;   // completions' logprobs.text_offset of the next token
  bool sent_role_ = false;    // chat stream: the first chunk carries the role
};

}  // namespace leoam::server
