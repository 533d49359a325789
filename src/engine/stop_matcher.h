// StopMatcher: ends generated text before the first of a request's stop strings (OpenAI's
// `stop`), while the text streams out.
//
// Text is pushed as it is generated; push() returns what is now safe to emit: text that can no
// longer become part of a stop string. The longest tail of the text that is the beginning of
// some stop string is held back until the next push decides it. Once a stop string appears, the
// text before it is returned, stopped() turns true, and everything after is dropped. The stop
// string itself is never returned (as in the OpenAI API).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace leoam {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text`; returns the part of the text so far that is safe to emit and not yet
  // returned (possibly empty). After a stop string: "" and nothing more.
  std::string push(std::string_view text);
  // At the end of generation: what is held back (it did not become a stop string).
  std::string flush();
  bool stopped() const { return stopped_; }
  // Bytes held back now.
  size_t n_pending() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace leoam
