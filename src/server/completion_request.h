// The body of POST /v1/completions and /v1/chat/completions, parsed and checked. Fields (OpenAI's
// names; missing ones take the server's defaults, from its flags):
//   completions: prompt (a string, a one-string array, or an array of token ids), logprobs (0-20)
//   chat:        messages ([{role, content}], content a string or [{type: "text", text}]),
//                logprobs (bool) with top_logprobs (0-20), tools and tool_choice
//   both:        max_tokens (chat also max_completion_tokens), temperature (0-2), top_p (0-1],
//                top_k, min_p [0-1], repeat_penalty, seed, stop (a string or up to 16), stream,
//                stream_options.include_usage, response_format, n (1 only), model, user (not used)
// A field of the wrong type or out of range, a missing prompt or messages, or one this server
// cannot honour (n > 1, echo, penalties, logit_bias, ...) is a 400 naming it; others are ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/json_constraint.h"

#include "engine/sampler.h"
#include "server/api_error.h"

namespace leoam::server {

enum class Endpoint : uint8_t { kCompletions, kChat };

struct RequestDefaults {
  SamplerOptions sampler;  // the seed unused: a request without one gets a random seed
  int max_tokens = 256;    // when the request gives none
  int max_tokens_limit = 4096;  // the most a request may ask for (400 beyond)
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string prompt;                 // completions, as text
  std::vector<int32_t> prompt_tokens; // completions, as token ids (then prompt is empty)
  nlohmann::json messages;            // chat: the checked array, content parts joined to strings
  int max_tokens = 0;
  SamplerOptions sampler;
  std::optional<uint64_t> seed;       // none: the server draws one
  std::vector<std::string> stop;
  std::string model;                  // empty: not given
  std::optional<JsonConstraint> json; // response_format json_object or json_schema, or a tool call's
  bool tool_call = false;             // chat with tools and tool_choice required or a function: the
                                      // answer is a call, {"name": ..., "arguments": ...} (json)
  nlohmann::json tools;               // chat: the request's tools, rendered into the prompt (null: none)
  std::vector<std::string> tool_names;  // with tool_choice auto: the functions the answer may call
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  int n_logprobs = -1;                // -1: none; else the top alternatives asked for (0: the sampled token only)
};

struct ParsedRequest {
  std::optional<CompletionRequest> request;
  ApiError error;  // when request is empty
};

ParsedRequest parse_completion_request(std::string_view body, Endpoint endpoint, const RequestDefaults& defaults);

}  // namespace leoam::server
