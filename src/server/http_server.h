// HttpServer: the OpenAI-compatible HTTP API of `leoam serve`, over a BatchScheduler.
//   POST /v1/completions, /v1/chat/completions   whole JSON, or with "stream": true SSE chunks
//                                                 ending in "data: [DONE]"
//   GET  /v1/models, /health, /metrics (Prometheus text), and / (a page to ask about a document)
// Errors are OpenAI's JSON shape (api_error.h): 400 for a bad request (malformed JSON, a field of
// the wrong type, max_tokens over the limit, a prompt longer than the context), 401 without the
// API key (every endpoint but /health and the page), 403 for a Host or browser origin that is not
// allowed (request_guard.h), 404, 413 for a body over the limit (as its bytes arrive), 503 with
// Retry-After when the queue is full, 500 when the engine fails. A client that hangs up cancels
// its request, streamed or not, which frees its KV (/metrics counts the hang-ups).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/batch_scheduler.h"
#include "server/api_error.h"
#include "server/completion_request.h"
#include "server/connection_watch.h"
#include "server/request_guard.h"
#include "server/server_metrics.h"

namespace httplib {
class ContentReader;
class Server;
struct Request;
struct Response;
}

namespace leoam {
class PromptCache;
class Tokenizer;
}

namespace leoam::server {

// Renders chat messages (the checked array) and the request's tools (null: none) into the prompt
// text; errors are the template's.
using ChatRenderer = std::function<Result<std::string>(const nlohmann::json& messages, const nlohmann::json& tools)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: a free port (port() says which)
  std::string api_key;  // empty: no key needed
  std::vector<std::string> allowed_hosts;  // Host names accepted besides the bound address's ("*": any)
  std::string cors_origin;                 // a cross-origin browser origin allowed ("*": any); empty: none
  int backlog = 512;    // connections the kernel queues before the server accepts them
  uint64_t max_body_bytes = 8ull << 20;
  std::string model_id;
  int64_t n_ctx = 0;  // a request's context: its prompt and generated tokens
  int n_threads = 16; // connections served at once (streams hold one each)
  RequestDefaults defaults;
  ChatRenderer chat;  // null: /v1/chat/completions answers 400 (no chat template)
  const PromptCache* prompt_cache = nullptr;  // for /metrics; null: none
  // The operator's name for a setting that an error's fix changes (the CLI: its flag), shown
  // beside the message; empty: not named.
  std::function<std::string(Setting)> setting_name;
};

class HttpServer {
 public:
  // Binds to host:port; fails (kIoError) when it cannot. `scheduler` and `tokenizer` must
  // outlive the server.
  static Result<std::unique_ptr<HttpServer>> create(const HttpServerOptions& options, BatchScheduler& scheduler,
                                                    const Tokenizer& tokenizer);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Serves until stop(); returns false when serving failed.
  bool run();
  // Stops run() (from any thread, a signal handler's thread included).
  void stop();

 private:
  HttpServer(const HttpServerOptions& options, BatchScheduler& scheduler, const Tokenizer& tokenizer);
  void add_routes();
  // A request's body into `body`, at most max_body_bytes of it; false with the error in `res`.
  bool read_body(const httplib::ContentReader& reader, std::string& body, httplib::Response& res) const;
  // Answers a completion or chat request into `res`.
  void complete(Endpoint endpoint, const httplib::Request& req, const std::string& body, httplib::Response& res);
  void stream(const CompletionRequest& request, std::shared_ptr<GenerationStream> events, ConnectionWatch watch,
              std::chrono::steady_clock::time_point arrived, httplib::Response& res);

  // A 400 when `text` holds more bytes than the context's tokens could (before tokenizing it).
  std::optional<ApiError> surely_too_long(const std::string& text, const char* param) const;
  // " (NAME)" for a setting the operator names (HttpServerOptions::setting_name), else "".
  std::string named(Setting setting) const;

  HttpServerOptions options_;
  RequestGuardOptions guard_;
  int64_t max_token_bytes_ = 0;  // the longest token's text in the vocabulary
  BatchScheduler& scheduler_;
  const Tokenizer& tokenizer_;
  ServerMetrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
};

}  // namespace leoam::server
