#include "server/api_error.h"

#include <utility>

namespace leoam::server {

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", std::move(e)}};
}

ApiError bad_request(std::string message, std::string param) {
  return {400, std::move(message), "invalid_request_error", std::move(param), {}};
}

ApiError api_error_from_status(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument: return bad_request(status.message());
    case StatusCode::kResourceExhausted: return {503, status.message(), "server_error", {}, "server_busy"};
    case StatusCode::kCancelled: return {503, status.message(), "server_error", {}, "server_stopping"};
    default: return {500, status.message(), "server_error", {}, {}};
  }
}

}  // namespace leoam::server
