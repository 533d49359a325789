#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "gguf/gguf_file.h"
#include "gguf/gguf_info.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace leoam {
namespace {

bool has_line_with(const std::string& text, std::initializer_list<const char*> parts) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    bool all = true;
    size_t from = 0;
    for (const char* p : parts) {  // in order on one line
      const size_t at = line.find(p, from);
      if (at == std::string::npos) {
        all = false;
        break;
      }
      from = at + std::strlen(p);
    }
    if (all) return true;
  }
  return false;
}

TEST(GgufInfo, Stories260K) {
  LEOAM_SKIP_WITHOUT_FIXTURE("models/stories260K/stories260K.gguf");
  auto f = GgufFile::open(test::fixture("models/stories260K/stories260K.gguf"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  std::ostringstream out;
  print_gguf_info(*f, out);
  const std::string s = out.str();
  EXPECT_TRUE(has_line_with(s, {"version: 3"})) << s;
  EXPECT_TRUE(has_line_with(s, {"alignment: 32"}));
  EXPECT_TRUE(has_line_with(s, {"tensors: 48"}));
  EXPECT_TRUE(has_line_with(s, {"metadata keys: 19"}));
  EXPECT_TRUE(has_line_with(s, {"llama.block_count", "u32", "5"}));
  EXPECT_TRUE(has_line_with(s, {"general.architecture", "string", "\"llama\""}));
  EXPECT_TRUE(has_line_with(s, {"llama.attention.layer_norm_rms_epsilon", "f32", "1e-05"}));
  EXPECT_TRUE(has_line_with(s, {"tokenizer.ggml.tokens", "array[string]", "[512 x string] \"<unk>\", \"<s>\", \"</s>\"", "..."}));
  EXPECT_TRUE(has_line_with(s, {"blk.0.attn_q.weight", "F32", "64 x 64", "262400", "16384"}));
  EXPECT_TRUE(has_line_with(s, {"blk.0.ffn_down.weight", "F32", "172 x 64", "44032"}));
  EXPECT_TRUE(has_line_with(s, {"total parameters: 292800"}));
  EXPECT_TRUE(has_line_with(s, {"total tensor bytes: 1171200 (1.12 MiB)"}));
  // Long arrays are abbreviated: the 512 tokens do not all appear.
  EXPECT_EQ(s.find("<0xFF>"), std::string::npos);
}

TEST(GgufInfo, UnsupportedTypeIsNamed) {
  test::RawGguf g;
  g.header(1, 0).tensor_info("q5", {256}, 13, 0).pad().zeros(176);
  auto f = GgufFile::parse("q5.gguf", g.bytes.data(), g.bytes.size());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  std::ostringstream out;
  print_gguf_info(*f, out);
  EXPECT_TRUE(has_line_with(out.str(), {"q5", "Q5_K", "256", "0", "176"})) << out.str();
  EXPECT_TRUE(has_line_with(out.str(), {"total parameters: 256"}));
}

}  // namespace
}  // namespace leoam
