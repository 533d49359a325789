// Which requests may reach the API, before any route runs: the Host header names this server
// (so that a web page cannot reach it through DNS rebinding), a browser's Origin is this server's
// own page or the one --cors-origin allows (so that a cross-site form or fetch is refused), and
// the API key, where there is one, comes as "Authorization: Bearer KEY" (the scheme in any case).
//
// Host: allowed when the header is absent (HTTP/1.0 clients), when --allowed-hosts holds "*" or
// the name, when the name is the bound address, when it is a loopback name and the server
// listens on loopback or on every address, and, when it listens on every address, when it is an
// IP literal (DNS rebinding needs a name). Names compare without the port and in lower case.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace leoam::server {

struct RequestGuardOptions {
  std::string bound_host;                 // the address the server listens on
  std::vector<std::string> allowed_hosts;  // more Host names; "*": any
  std::string cors_origin;                // a cross-origin browser origin allowed ("*": any); empty: none
  std::string api_key;                    // empty: none needed
};

// The name of a Host header value: without its port, IPv6 brackets removed, in lower case.
std::string host_name(std::string_view host_header);

bool host_allowed(const RequestGuardOptions& options, std::string_view host_header);

enum class OriginVerdict {
  kNone,        // no Origin header: not a cross-origin browser request
  kSameOrigin,  // this server's own page (the Origin's host and port are the Host header's)
  kCors,        // a cross-origin browser request that --cors-origin allows
  kRefused,
};
OriginVerdict check_origin(const RequestGuardOptions& options, std::string_view origin, std::string_view host_header);

// The key of an "Authorization: Bearer KEY" header matches api_key (compared in a time that does
// not depend on where they differ); the scheme word in any case.
bool bearer_matches(std::string_view authorization, std::string_view api_key);

}  // namespace leoam::server
