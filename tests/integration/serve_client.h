// Requests of the `leoam serve` tests (serve_*_cli_test.cpp): a completion streamed as server-sent
// events, read chunk by chunk (or hung up on after some), and a whole JSON answer.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace leoam::testing_cli {

// What a streamed completion delivered: its chunks' text, the last chunk, and whether it ended
// with "data: [DONE]".
struct Streamed {
  int status = 0;
  std::string text;
  nlohmann::json last;
  bool done = false;
  std::vector<nlohmann::json> chunks;
};

// Posts `body` with "stream": true and reads its SSE events; `stop_after` > 0 hangs up after that
// many chunks.
inline Streamed post_stream(httplib::Client& c, const std::string& path, nlohmann::json body, int stop_after = 0) {
  body["stream"] = true;
  Streamed out;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        out.done = true;
        continue;
      }
      out.chunks.push_back(nlohmann::json::parse(payload));
      const nlohmann::json& j = out.chunks.back();
      if (j.contains("choices") && !j["choices"].empty()) {
        const nlohmann::json& ch = j["choices"][0];
        out.text += ch.contains("text") ? ch["text"].get<std::string>() : ch["delta"].value("content", "");
      }
      out.last = j;
      if (stop_after > 0 && static_cast<int>(out.chunks.size()) >= stop_after) return false;
    }
    return true;
  };
  httplib::Result r = c.send(req);
  out.status = r ? r->status : 0;
  return out;
}

inline nlohmann::json post_json(httplib::Client& c, const std::string& path, const nlohmann::json& body, int* status) {
  httplib::Result r = c.Post(path, body.dump(), "application/json");
  *status = r ? r->status : 0;
  return r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
}

}  // namespace leoam::testing_cli
