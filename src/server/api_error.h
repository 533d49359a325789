// An error as the OpenAI API returns it: an HTTP status and the JSON body
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace leoam::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty: null
  std::string code;   // empty: null

  nlohmann::json body() const;
};

// 400 naming `param`.
ApiError bad_request(std::string message, std::string param = {});
// The HTTP form of an engine error: kInvalidArgument 400, kResourceExhausted 503 (busy),
// kCancelled 503 (stopping), anything else 500.
ApiError api_error_from_status(const Status& status);

}  // namespace leoam::server
