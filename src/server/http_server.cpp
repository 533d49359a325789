#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <utility>

#include "engine/prompt_cache.h"
#include "server/api_error.h"
#include "server/completion_response.h"
#include "server/web_page.h"
#include "tokenizer/tokenizer.h"

namespace leoam::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// JSON text; generated text may hold bytes that are not UTF-8 (a stray byte token): they become
// U+FFFD rather than failing the response.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.http_status == 503) res.set_header("Retry-After", "1");
  send_json(res, e.http_status, e.body());
}

// Equal strings, in a time that does not depend on where they differ (only on their length).
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

uint64_t random_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// The metrics label of a request's path: one of the endpoints, or "(other)" (a label that
// clients could vary without end would grow the metrics without end).
std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/", "/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions"}) {
    if (path == known) return path;
  }
  return "(other)";
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

// The error a finished request reports in place of its answer (none when it ended normally).
std::optional<ApiError> failure(const GenerationEvent& last) {
  if (last.finish == FinishReason::kError) return api_error_from_status(last.error);
  if (last.finish == FinishReason::kCancelled) {
    return ApiError{503, "the request was cancelled: the server is stopping", "server_error", {}, "server_stopping"};
  }
  return std::nullopt;
}

}  // namespace

HttpServer::HttpServer(const HttpServerOptions& options, BatchScheduler& scheduler, const Tokenizer& tokenizer)
    : options_(options), scheduler_(scheduler), tokenizer_(tokenizer), http_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::create(const HttpServerOptions& options, BatchScheduler& scheduler,
                                                       const Tokenizer& tokenizer) {
  std::unique_ptr<HttpServer> s(new HttpServer(options, scheduler, tokenizer));
  const int n_threads = std::max(4, options.n_threads);
  s->http_->new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
  s->http_->set_payload_max_length(options.max_body_bytes);
  s->add_routes();
  if (options.port == 0) {
    s->port_ = s->http_->bind_to_any_port(options.host);
  } else if (s->http_->bind_to_port(options.host, options.port)) {
    s->port_ = options.port;
  } else {
    s->port_ = -1;
  }
  if (s->port_ <= 0) {
    return io_error("cannot listen on " + options.host + ":" + std::to_string(options.port) +
                    " (--host, --port): the address is in use or not this machine's");
  }
  return s;
}

bool HttpServer::run() { return http_->listen_after_bind(); }

void HttpServer::stop() {
  if (http_ != nullptr && http_->is_running()) http_->stop();
}

void HttpServer::add_routes() {
  httplib::Server& h = *http_;
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // The page holds no data (its requests carry the key), and /health is for load balancers.
    if (options_.api_key.empty() || req.path == "/health" || req.path == "/") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
        same_secret(std::string_view(auth).substr(kBearer.size()), options_.api_key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, {401, auth.empty() ? "no API key: send the header 'Authorization: Bearer KEY' (--api-key)"
                                       : "the API key is not valid",
                     "invalid_request_error", {}, "invalid_api_key"});
    metrics_.record_request(endpoint_label(req.path), 401);
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors that httplib answers itself (no route, a body over the limit) get the API's JSON.
  h.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      send_error(res, {413, "the request body is larger than the server's limit of " +
                                std::to_string(options_.max_body_bytes) + " bytes (--max-body-mb)",
                       "invalid_request_error", {}, "request_too_large"});
    } else if (res.status == 404) {
      send_error(res, {404, "no endpoint " + req.method + " " + req.path, "invalid_request_error", {}, "not_found"});
    } else {
      send_error(res, {res.status, "the request could not be served (HTTP " + std::to_string(res.status) + ")",
                       "invalid_request_error", {}, {}});
    }
    metrics_.record_request(endpoint_label(req.path), res.status);
  });
  h.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, {500, "internal error: " + what, "server_error", {}, {}});
    metrics_.record_request(endpoint_label(req.path), 500);
  });

  h.Get("/", [this](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = web_page_html();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
    metrics_.record_request("/", 200);
  });
  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"status", "ok"}});
    metrics_.record_request("/health", 200);
  });
  h.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", options_.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "leoam"},
                        {"meta", {{"n_ctx", options_.n_ctx}, {"max_tokens_limit", options_.defaults.max_tokens_limit}}}};
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
    metrics_.record_request("/v1/models", 200);
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::optional<PromptCacheStats> cache;
    if (options_.prompt_cache != nullptr) cache = options_.prompt_cache->stats();
    res.set_content(metrics_.prometheus_text(scheduler_.stats(), cache ? &*cache : nullptr), "text/plain; version=0.0.4");
    metrics_.record_request("/metrics", 200);
  });
  h.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    complete(Endpoint::kCompletions, req.body, res);
    metrics_.record_request("/v1/completions", res.status);
  });
  h.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    complete(Endpoint::kChat, req.body, res);
    metrics_.record_request("/v1/chat/completions", res.status);
  });
}

void HttpServer::complete(Endpoint endpoint, const std::string& body, httplib::Response& res) {
  const Clock::time_point arrived = Clock::now();
  ParsedRequest parsed = parse_completion_request(body, endpoint, options_.defaults);
  if (!parsed.request) return send_error(res, parsed.error);
  CompletionRequest& request = *parsed.request;

  GenerationRequest gen;
  if (endpoint == Endpoint::kChat) {
    if (!options_.chat) {
      return send_error(res, bad_request("this model has no chat template: start the server with --chat-template NAME|FILE, "
                                         "or use /v1/completions", "messages"));
    }
    Result<std::string> prompt = options_.chat(request.messages);
    if (!prompt.is_ok()) return send_error(res, bad_request("the chat template failed: " + prompt.status().message(), "messages"));
    // The template writes the special tokens as text; BOS is added where the vocabulary wants one,
    // unless the template wrote it already.
    const std::string bos = tokenizer_.bos_id() >= 0 ? tokenizer_.token_text(tokenizer_.bos_id()) : "";
    const bool has_bos = !bos.empty() && prompt->rfind(bos, 0) == 0;
    gen.prompt_tokens = tokenizer_.tokenize(*prompt, /*add_bos=*/!has_bos, /*parse_special=*/true);
  } else if (!request.prompt_tokens.empty()) {
    for (int32_t t : request.prompt_tokens) {
      if (t >= tokenizer_.n_vocab()) {
        return send_error(res, bad_request("token id " + std::to_string(t) + " in 'prompt' is out of the vocabulary of " +
                                               std::to_string(tokenizer_.n_vocab()), "prompt"));
      }
    }
    gen.prompt_tokens = std::move(request.prompt_tokens);
  } else {
    gen.prompt_tokens = tokenizer_.tokenize(request.prompt, /*add_bos=*/true, /*parse_special=*/true);
    gen.strip_leading_space = request.prompt.empty();
  }
  const auto n_prompt = static_cast<int64_t>(gen.prompt_tokens.size());
  if (n_prompt == 0) return send_error(res, bad_request("the prompt is empty: nothing to generate from", "prompt"));
  if (n_prompt >= options_.n_ctx) {
    return send_error(res, bad_request("the prompt has " + std::to_string(n_prompt) +
                                           " tokens; the context holds " + std::to_string(options_.n_ctx) +
                                           " with room for at least one generated token (-c)",
                                       endpoint == Endpoint::kChat ? "messages" : "prompt"));
  }
  gen.n_predict = request.max_tokens;
  gen.sampler = request.sampler;
  gen.sampler.seed = request.seed ? *request.seed : random_seed();
  gen.stop = request.stop;
  gen.n_top_logprobs = request.n_logprobs;
  Result<std::shared_ptr<GenerationStream>> events = scheduler_.submit(std::move(gen));
  if (!events.is_ok()) return send_error(res, api_error_from_status(events.status()));

  if (request.stream) return stream(request, std::move(*events), res);
  CompletionResponse answer(request, random_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-"), options_.model_id,
                            tokenizer_);
  bool first = true;
  for (;;) {
    std::optional<GenerationEvent> e = (*events)->next(1s);
    if (!e) continue;
    if (first && !e->tokens.empty()) {
      metrics_.record_first_token_ms(std::chrono::duration<double, std::milli>(Clock::now() - arrived).count());
      first = false;
    }
    answer.add(*e);
    if (!e->done) continue;
    if (std::optional<ApiError> err = failure(*e)) return send_error(res, *err);
    return send_json(res, 200, answer.body(*e));
  }
}

void HttpServer::stream(const CompletionRequest& request, std::shared_ptr<GenerationStream> events,
                        httplib::Response& res) {
  struct State {
    CompletionResponse answer;
    std::shared_ptr<GenerationStream> events;
    bool include_usage;
    Clock::time_point arrived;
    bool first = true;
  };
  auto state = std::make_shared<State>(State{
      CompletionResponse(request, random_id(request.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-"),
                         options_.model_id, tokenizer_),
      events, request.include_usage, Clock::now()});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state](size_t, httplib::DataSink& sink) {
        const auto write = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          state->events->cancel();  // the client is gone
          return false;
        };
        std::optional<GenerationEvent> e = state->events->next(200ms);
        if (!e) {
          if (sink.is_writable()) return true;
          state->events->cancel();
          return false;
        }
        if (state->first && !e->tokens.empty()) {
          metrics_.record_first_token_ms(std::chrono::duration<double, std::milli>(Clock::now() - state->arrived).count());
          state->first = false;
        }
        if ((!e->text.empty() || !e->tokens.empty()) && !write(sse(state->answer.chunk(*e)))) return false;
        if (!e->done) return true;
        if (std::optional<ApiError> err = failure(*e)) {
          if (!write(sse(err->body()))) return false;
        } else {
          json last = state->answer.final_chunk(*e);
          if (state->include_usage) {  // OpenAI's own usage chunk: no choices
            json usage_chunk = last;
            usage_chunk["choices"] = json::array();
            if (!write(sse(last)) || !write(sse(usage_chunk))) return false;
          } else if (!write(sse(last))) {
            return false;
          }
        }
        if (!write("data: [DONE]\n\n")) return false;
        sink.done();
        return true;
      },
      [state](bool success) {
        if (!success) state->events->cancel();
      });
}

}  // namespace leoam::server
