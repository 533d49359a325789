#include "server/request_guard.h"

#include <algorithm>
#include <cctype>

namespace leoam::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_any_address(std::string_view host) { return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]"; }

// An IPv4 dotted quad or an IPv6 literal (a name with a colon cannot be a DNS name).
bool is_ip_literal(std::string_view name) {
  if (name.find(':') != std::string_view::npos) return true;
  int dots = 0;
  for (char c : name) {
    if (c == '.') {
      ++dots;
    } else if (std::isdigit(static_cast<unsigned char>(c)) == 0) {
      return false;
    }
  }
  return dots == 3;
}

bool is_loopback(std::string_view name) {
  return name == "localhost" || name == "::1" || (is_ip_literal(name) && name.substr(0, 4) == "127.");
}

}  // namespace

std::string host_name(std::string_view host_header) {
  std::string_view h = host_header;
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  while (!h.empty() && h.back() == ' ') h.remove_suffix(1);
  if (!h.empty() && h.front() == '[') {  // [v6]:port
    const size_t close = h.find(']');
    return lower(h.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  const size_t colon = h.find(':');
  if (colon != std::string_view::npos && h.find(':', colon + 1) == std::string_view::npos) h = h.substr(0, colon);
  return lower(h);
}

bool host_allowed(const RequestGuardOptions& o, std::string_view host_header) {
  if (host_header.empty()) return true;
  const std::string name = host_name(host_header);
  for (const std::string& allowed : o.allowed_hosts) {
    if (allowed == "*" || host_name(allowed) == name) return true;
  }
  const std::string bound = host_name(o.bound_host);
  if (name == bound) return true;
  const bool any = is_any_address(bound);
  if (is_loopback(name) && (any || is_loopback(bound))) return true;
  return any && is_ip_literal(name);
}

OriginVerdict check_origin(const RequestGuardOptions& o, std::string_view origin, std::string_view host_header) {
  if (origin.empty()) return OriginVerdict::kNone;
  const std::string got = lower(origin);
  const std::string host = lower(host_header);
  if (!host.empty() && (got == "http://" + host || got == "https://" + host)) return OriginVerdict::kSameOrigin;
  if (o.cors_origin == "*" || (!o.cors_origin.empty() && lower(o.cors_origin) == got)) return OriginVerdict::kCors;
  return OriginVerdict::kRefused;
}

bool bearer_matches(std::string_view authorization, std::string_view api_key) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() || lower(authorization.substr(0, kScheme.size())) != kScheme) return false;
  std::string_view key = authorization.substr(kScheme.size());
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  if (key.size() != api_key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(key[i] ^ api_key[i]);
  return diff == 0;
}

}  // namespace leoam::server
