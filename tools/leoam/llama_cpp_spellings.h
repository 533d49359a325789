// llama.cpp's single-dash long options (-ngl 99, -no-cnv), which CLI11 would read as bundles of
// short flags, rewritten to leoam's double-dash names before parsing, so that a llama.cpp habit
// works or fails with a message about the option it is, not about stray letters.
#pragma once

#include <string>
#include <vector>

namespace leoam::cli {

// argv[1..] with each llama.cpp single-dash long option replaced by its leoam name.
std::vector<std::string> rewrite_llama_cpp_spellings(int argc, char** argv);

}  // namespace leoam::cli
