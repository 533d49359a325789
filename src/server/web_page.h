// The page that GET / serves: paste or upload a document, ask questions about it, and watch the
// answer stream in, with the tokens reused, the share of KV attended and the bytes read per tier
// (from the answer's "usage" and "leoam" fields). Plain HTML and JavaScript over /v1/completions.
#pragma once

#include <string_view>

namespace leoam::server {

std::string_view web_page_html();

}  // namespace leoam::server
