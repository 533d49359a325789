// Helpers for the tokenizer tests: fixture paths, llama.cpp's vocab test-file formats, and a
// per-process cache of loaded tokenizers (the vocabularies are big; each loads once).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace leoam::test {

inline std::string fixtures_dir() { return LEOAM_FIXTURES_DIR; }
inline std::string vocab_dir() { return fixtures_dir() + "/vocab"; }

inline bool fixtures_present() { return std::filesystem::is_directory(vocab_dir()); }

#define LEOAM_SKIP_WITHOUT_FIXTURES()                                                              \
  do {                                                                                             \
    if (!::leoam::test::fixtures_present()) {                                                      \
      GTEST_SKIP() << "fixtures not found at " << ::leoam::test::vocab_dir()                      \
                   << " (third-party test data; see ../shared/fixtures/README.md)";               \
    }                                                                                              \
  } while (0)

inline bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// "<case>\n__ggml_vocab_test__\n<case>\n__ggml_vocab_test__\n" -> cases (the file ends with the separator).
inline std::vector<std::string> split_cases(const std::string& inp) {
  static const std::string kSep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  size_t start = 0;
  while (start <= inp.size()) {
    const size_t end = inp.find(kSep, start);
    if (end == std::string::npos) {
      if (start < inp.size()) cases.push_back(inp.substr(start));
      break;
    }
    cases.push_back(inp.substr(start, end - start));
    start = end + kSep.size();
  }
  return cases;
}

// One line of ids separated by spaces (a leading space is allowed).
inline std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  long long v = 0;
  while (in >> v) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

inline std::vector<std::vector<int32_t>> parse_lines(const std::string& text) {
  std::vector<std::vector<int32_t>> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(parse_ids(line));
  return lines;
}

// Loads ggml-vocab-<name>.gguf once per process; null (and a failure) when it does not load.
inline const Tokenizer* load_vocab(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  const std::string path = vocab_dir() + "/ggml-vocab-" + name + ".gguf";
  auto gguf = GgufFile::open(path);
  if (!gguf.is_ok()) {
    ADD_FAILURE() << gguf.status().message();
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf(*gguf);
  if (!tok.is_ok()) {
    ADD_FAILURE() << tok.status().message();
    return nullptr;
  }
  return cache.emplace(name, std::move(tok).value()).first->second.get();
}

inline std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

// The case text with control characters made visible, for failure messages.
inline std::string printable(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out.push_back(c);
    }
  }
  return "\"" + out + "\"";
}

}  // namespace leoam::test
