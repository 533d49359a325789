#include "llama_cpp_spellings.h"

#include <string_view>
#include <utility>

namespace leoam::cli {

std::vector<std::string> rewrite_llama_cpp_spellings(int argc, char** argv) {
  // llama.cpp's spelling and leoam's; only those whose letters would otherwise parse as something else.
  static constexpr std::pair<std::string_view, std::string_view> kSpellings[] = {
      {"-ngl", "--n-gpu-layers"}, {"-no-cnv", "--no-conversation"}, {"-cnv", "--conversation"},
      {"-fa", "--flash-attn"},    {"-ctk", "--cache-type-k"},       {"-ctv", "--cache-type-v"},
      {"-tb", "--threads-batch"}, {"-np", "--parallel"},            {"-ub", "--ubatch-size"},
      {"-sys", "--system-prompt"},
  };
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") {  // everything after is an argument, as given
      for (; i < argc; ++i) out.emplace_back(argv[i]);
      break;
    }
    for (const auto& [llama, leoam] : kSpellings) {
      if (a == llama) {
        a = leoam;
        break;
      }
    }
    out.emplace_back(a);
  }
  return out;
}

}  // namespace leoam::cli
