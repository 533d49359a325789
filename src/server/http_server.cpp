#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <utility>

#include "engine/prompt_cache.h"
#include "server/api_error.h"
#include "server/completion_response.h"
#include "server/connection_watch.h"
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
    : options_(options),
      guard_{options.host, options.allowed_hosts, options.cors_origin, options.api_key},
      scheduler_(scheduler),
      tokenizer_(tokenizer),
      http_(std::make_unique<httplib::Server>()) {
  for (int32_t id = 0; id < tokenizer.n_vocab(); ++id) {
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int64_t>(tokenizer.token_text(id).size()));
  }
}

std::optional<ApiError> HttpServer::surely_too_long(const std::string& text, const char* param) const {
  // No token of the vocabulary is longer than max_token_bytes_ (in its stored form, at least as
  // long as the bytes it stands for), so a text longer than that many bytes a position cannot
  // fit, and tokenizing it (megabytes, perhaps) would be wasted.
  if (static_cast<int64_t>(text.size()) <= options_.n_ctx * std::max<int64_t>(max_token_bytes_, 1)) return std::nullopt;
  return bad_request("the prompt has " + std::to_string(text.size()) + " bytes: more tokens than the context holds (" +
                         std::to_string(options_.n_ctx) + ")" + named(Setting::kContextSize),
                     param);
}

HttpServer::~HttpServer() { stop(); }

std::string HttpServer::named(Setting setting) const {
  return options_.setting_name ? " (" + options_.setting_name(setting) + ")" : std::string();
}

Result<std::unique_ptr<HttpServer>> HttpServer::create(const HttpServerOptions& options, BatchScheduler& scheduler,
                                                       const Tokenizer& tokenizer) {
  std::unique_ptr<HttpServer> s(new HttpServer(options, scheduler, tokenizer));
  const int n_threads = std::max(4, options.n_threads);
  s->http_->new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
  s->http_->set_payload_max_length(options.max_body_bytes);
  // The library listens with a backlog of 5, which overflows under a burst of clients: the
  // listening socket is listened on again with ours once bound (its descriptor kept here).
  int listen_fd = -1;
  s->http_->set_socket_options([&listen_fd](int fd) {
    httplib::default_socket_options(fd);
    listen_fd = fd;
  });
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
                    ": the address is in use or not this machine's")
        .about(Setting::kListenAddress);
  }
  if (listen_fd < 0 || ::listen(listen_fd, options.backlog) != 0) {
    return io_error("cannot set the listen backlog to " + std::to_string(options.backlog)).about(Setting::kListenBacklog);
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
    const auto refuse = [&](const ApiError& e) {
      send_error(res, e);
      metrics_.record_request(endpoint_label(req.path), e.http_status);
      return httplib::Server::HandlerResponse::Handled;
    };
    const std::string host = req.get_header_value("Host");
    if (!host_allowed(guard_, host)) {
      return refuse({403, "the Host '" + host + "' does not name this server; to serve it under that name, allow the "
                              "host " + host_name(host) + named(Setting::kAllowedHosts),
                     "invalid_request_error", {}, "host_not_allowed"});
    }
    const std::string origin = req.get_header_value("Origin");
    const OriginVerdict verdict = check_origin(guard_, origin, host);
    if (verdict == OriginVerdict::kRefused) {
      return refuse({403, "requests from the web origin '" + origin + "' are refused; to allow it, allow the origin " +
                              origin + named(Setting::kCorsOrigin),
                     "invalid_request_error", {}, "origin_not_allowed"});
    }
    if (verdict == OriginVerdict::kCors) {
      res.set_header("Access-Control-Allow-Origin", guard_.cors_origin == "*" ? "*" : origin);
      res.set_header("Vary", "Origin");
    }
    if (req.method == "OPTIONS") {  // a browser's preflight, before the key is sent
      res.status = 204;
      res.set_header("Allow", "GET, POST, OPTIONS");
      if (verdict == OriginVerdict::kCors) {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
      }
      metrics_.record_request(endpoint_label(req.path), 204);
      return httplib::Server::HandlerResponse::Handled;
    }
    // The page holds no data (its requests carry the key), and /health is for load balancers.
    if (guard_.api_key.empty() || req.path == "/health" || req.path == "/") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string auth = req.get_header_value("Authorization");
    if (bearer_matches(auth, guard_.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    return refuse({401, auth.empty() ? "no API key: send the header 'Authorization: Bearer KEY'" + named(Setting::kApiKey)
                                     : "the API key is not valid",
                   "invalid_request_error", {}, "invalid_api_key"});
  });
  // Errors that httplib answers itself (no route, a body over the limit) get the API's JSON.
  h.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      send_error(res, {413, "the request body is larger than the server's limit of " +
                                std::to_string(options_.max_body_bytes) + " bytes" + named(Setting::kMaxBody),
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
  for (const auto& [path, endpoint] : {std::pair{"/v1/completions", Endpoint::kCompletions},
                                       std::pair{"/v1/chat/completions", Endpoint::kChat}}) {
    h.Post(path, [this, path, endpoint](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
      std::string body;
      if (read_body(reader, body, res)) complete(endpoint, req, body, res);
      metrics_.record_request(path, res.status);
    });
  }
}

bool HttpServer::read_body(const httplib::ContentReader& reader, std::string& body, httplib::Response& res) const {
  // The limit holds on the bytes as they arrive: a chunked body has no length to check first.
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t n) {
    if (body.size() + n > options_.max_body_bytes) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (read) return true;
  res.set_header("Connection", "close");  // the rest of the body is not read
  if (too_large || res.status == 413) {
    send_error(res, {413, "the request body is larger than the server's limit of " +
                              std::to_string(options_.max_body_bytes) + " bytes" + named(Setting::kMaxBody),
                     "invalid_request_error", {}, "request_too_large"});
  } else {
    send_error(res, {400, "the request body could not be read", "invalid_request_error", {}, {}});
  }
  return false;
}

void HttpServer::complete(Endpoint endpoint, const httplib::Request& req, const std::string& body,
                          httplib::Response& res) {
  const Clock::time_point arrived = Clock::now();
  ParsedRequest parsed = parse_completion_request(body, endpoint, options_.defaults);
  if (!parsed.request) return send_error(res, parsed.error);
  CompletionRequest& request = *parsed.request;
  if (!request.model.empty() && request.model != options_.model_id) {
    return send_error(res, {404, "the model '" + request.model + "' is not served here: this server serves '" +
                                     options_.model_id + "' (GET /v1/models)" + named(Setting::kModelAlias),
                            "invalid_request_error", "model", "model_not_found"});
  }

  GenerationRequest gen;
  if (endpoint == Endpoint::kChat) {
    if (!options_.chat) {
      return send_error(res, bad_request("this model has no chat template: start the server with one" +
                                             named(Setting::kChatTemplate) + ", or use /v1/completions",
                                         "messages"));
    }
    Result<std::string> prompt = options_.chat(request.messages, request.tools);
    if (!prompt.is_ok()) return send_error(res, bad_request("the chat template failed: " + prompt.status().message(), "messages"));
    if (std::optional<ApiError> e = surely_too_long(*prompt, "messages")) return send_error(res, *e);
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
    if (std::optional<ApiError> e = surely_too_long(request.prompt, "prompt")) return send_error(res, *e);
    gen.prompt_tokens = tokenizer_.tokenize(request.prompt, /*add_bos=*/true, /*parse_special=*/true);
    gen.strip_leading_space = request.prompt.empty();
  }
  const auto n_prompt = static_cast<int64_t>(gen.prompt_tokens.size());
  if (n_prompt == 0) return send_error(res, bad_request("the prompt is empty: nothing to generate from", "prompt"));
  if (n_prompt >= options_.n_ctx) {
    return send_error(res, bad_request("the prompt has " + std::to_string(n_prompt) +
                                           " tokens; the context holds " + std::to_string(options_.n_ctx) +
                                           " with room for at least one generated token",
                                       endpoint == Endpoint::kChat ? "messages" : "prompt"));
  }
  gen.n_predict = request.max_tokens;
  gen.sampler = request.sampler;
  gen.sampler.seed = request.seed ? *request.seed : random_seed();
  gen.stop = request.stop;
  gen.n_top_logprobs = request.n_logprobs;
  gen.json = request.json;
  Result<std::shared_ptr<GenerationStream>> events = scheduler_.submit(std::move(gen));
  if (!events.is_ok()) return send_error(res, api_error_from_status(events.status()));

  // A client that hangs up before its answer is done cancels it: a whole answer writes nothing
  // before its end, and a stream nothing while its prompt is prefilled.
  const ConnectionWatch watch = ConnectionWatch::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (request.stream) return stream(request, std::move(*events), watch, arrived, res);
  CompletionResponse answer(request, random_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-"), options_.model_id,
                            tokenizer_);
  double first_ms = -1.0;
  for (;;) {
    std::optional<GenerationEvent> e = (*events)->next(200ms);
    if (watch.peer_gone()) {
      (*events)->cancel();
      metrics_.record_client_gone();
      res.status = 499;  // nginx's "client closed request": nobody reads it, /metrics counts it
      return;
    }
    if (!e) continue;
    const double now_ms = std::chrono::duration<double, std::milli>(Clock::now() - arrived).count();
    if (first_ms < 0 && !e->tokens.empty()) {
      first_ms = now_ms;
      metrics_.record_first_token_ms(first_ms);
    }
    answer.add(*e);
    if (!e->done) continue;
    if (std::optional<ApiError> err = failure(*e)) return send_error(res, *err);
    metrics_.record_completion(now_ms, first_ms, e->n_generated);
    return send_json(res, 200, answer.body(*e));
  }
}

void HttpServer::stream(const CompletionRequest& request, std::shared_ptr<GenerationStream> events,
                        ConnectionWatch watch, Clock::time_point arrived, httplib::Response& res) {
  struct State {
    CompletionResponse answer;
    std::shared_ptr<GenerationStream> events;
    bool include_usage;
    ConnectionWatch watch;
    Clock::time_point arrived;
    double first_ms = -1.0;
  };
  auto state = std::make_shared<State>(State{
      CompletionResponse(request, random_id(request.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-"),
                         options_.model_id, tokenizer_),
      events, request.include_usage, watch, arrived});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state](size_t, httplib::DataSink& sink) {
        const auto write = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          state->events->cancel();  // the client is gone
          metrics_.record_client_gone();
          return false;
        };
        std::optional<GenerationEvent> e = state->events->next(200ms);
        if (!e) {
          if (sink.is_writable() && !state->watch.peer_gone()) return true;
          state->events->cancel();
          metrics_.record_client_gone();
          return false;
        }
        const double now_ms = std::chrono::duration<double, std::milli>(Clock::now() - state->arrived).count();
        if (state->first_ms < 0 && !e->tokens.empty()) {
          state->first_ms = now_ms;
          metrics_.record_first_token_ms(now_ms);
        }
        if (!e->text.empty() || !e->tokens.empty()) {
          const json chunk = state->answer.chunk(*e);
          if (!chunk.is_null() && !write(sse(chunk))) return false;
        }
        if (!e->done) return true;
        if (std::optional<ApiError> err = failure(*e)) {
          if (!write(sse(err->body()))) return false;
        } else {
          metrics_.record_completion(now_ms, state->first_ms, e->n_generated);
          if (!write(sse(state->answer.final_chunk(*e)))) return false;
          // OpenAI's usage chunk, only when asked for: clients that add up the usage they are
          // sent (LangChain) would count it twice on the chunk before it too.
          if (state->include_usage && !write(sse(state->answer.usage_chunk(*e)))) return false;
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
