// HttpServer: the OpenAI-compatible HTTP API of `leoam serve`, over a BatchScheduler.
//
//   POST /v1/completions, /v1/chat/completions   whole JSON, or with "stream": true SSE chunks
//                                                 ending in "data: [DONE]"
//   GET  /v1/models, /health, /metrics (Prometheus text), and / (a page to ask about a document)
//
// Errors are OpenAI's JSON shape (api_error.h): 400 for a bad request (malformed JSON, a field of
// the wrong type, max_tokens over the limit, a prompt longer than the context), 401 without the
// API key (every endpoint but /health and the page), 404, 413 for a body over the limit, 503 with Retry-After
// when the queue is full, 500 when the engine fails. A streaming client that goes away cancels
// its request, which frees its KV.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/batch_scheduler.h"
#include "server/completion_request.h"
#include "server/server_metrics.h"

namespace httplib {
class Server;
struct Response;
}

namespace leoam {
class PromptCache;
class Tokenizer;
}

namespace leoam::server {

// Renders chat messages (the checked array) into the prompt text; errors are the template's.
using ChatRenderer = std::function<Result<std::string>(const nlohmann::json& messages)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: a free port (port() says which)
  std::string api_key;  // empty: no key needed
  uint64_t max_body_bytes = 8ull << 20;
  std::string model_id;
  int64_t n_ctx = 0;  // a request's context: its prompt and generated tokens
  int n_threads = 16; // connections served at once (streams hold one each)
  RequestDefaults defaults;
  ChatRenderer chat;  // null: /v1/chat/completions answers 400 (no chat template)
  const PromptCache* prompt_cache = nullptr;  // for /metrics; null: none
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
  // Answers a completion or chat request into `res`.
  void complete(Endpoint endpoint, const std::string& body, httplib::Response& res);
  void stream(const CompletionRequest& request, std::shared_ptr<GenerationStream> events, httplib::Response& res);

  HttpServerOptions options_;
  BatchScheduler& scheduler_;
  const Tokenizer& tokenizer_;
  ServerMetrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
};

}  // namespace leoam::server
