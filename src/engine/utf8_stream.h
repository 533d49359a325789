// Utf8Stream: turns a stream of token pieces into text that never ends inside a UTF-8 sequence.
//
// A multi-byte character can be split over several byte tokens (SPM's <0xE2><0x82><0xAC> is
// "€"). Printing each piece as it comes would write half a character to the terminal, so the
// bytes of a trailing incomplete sequence are held back until the rest arrives. Bytes that can
// never complete (a stray continuation byte, a lead byte followed by a non-continuation byte)
// are passed through as they are: the stream only delays, it never drops or changes bytes.
#pragma once

#include <string>
#include <string_view>

namespace leoam {

class Utf8Stream {
 public:
  // Appends `piece` and returns the text that is now safe to emit (possibly empty).
  std::string push(std::string_view piece);
  // Returns whatever is held back (an incomplete sequence at the end of the stream).
  std::string flush();
  // Bytes currently held back (0 to 3).
  size_t n_pending() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace leoam
