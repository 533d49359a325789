// The reader on corrupt input: every malformed field gives an error that names the file and
// says what is wrong; nothing crashes or allocates from an absurd count.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"
#include "io/mapped_file.h"
#include "../temp_dir.h"

namespace leoam {
namespace {

using test::fails_with;
using test::RawGguf;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

Result<GgufFile> parse(const std::vector<uint8_t>& b) { return GgufFile::parse("bad.gguf", b.data(), b.size()); }

// One F32 tensor of 8 floats, so that its data (32 bytes) fills the alignment exactly.
std::vector<uint8_t> one_tensor_file(uint64_t offset, uint32_t type = kF32, std::vector<uint64_t> ne = {8}) {
  RawGguf g;
  g.header(1, 0).tensor_info("t", ne, type, offset).pad().zeros(32);
  return g.bytes;
}

TEST(GgufBadInput, ValidHandMadeFileParses) {
  // The builder makes valid files, so each failure below is due to the one broken field.
  auto f = parse(one_tensor_file(0));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->tensors()[0].n_bytes, 32u);
  EXPECT_EQ(f->data_offset(), 64u);
}

TEST(GgufBadInput, EveryPrefixOfAWrittenFileFails) {
  for (uint32_t version : {1u, 2u, 3u}) {
    GgufWriter w(version);
    w.set("general.name", GgufValue::from_string("prefix test"));
    w.set("a.u8", GgufValue::from_u8(7));
    w.set("a.f64", GgufValue::from_f64(0.25));
    w.set("a.strings", GgufValue::from_strings({"x", "yy", ""}));
    w.set("a.i32s", GgufValue::from_i32s({1, -2, 3}));
    ASSERT_TRUE(w.add_tensor_f32("t0", GgmlType::kF32, {8, 2}, std::vector<float>(16, 1.0f)).is_ok());
    ASSERT_TRUE(w.add_tensor_f32("t1", GgmlType::kF16, {16}, std::vector<float>(16, 2.0f)).is_ok());
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto whole = parse(bytes);
    ASSERT_TRUE(whole.is_ok()) << whole.status().message();
    // No trailing padding: the last tensor ends at the end of the file, so every prefix is short.
    const GgufTensorInfo& last = whole->tensors().back();
    ASSERT_EQ(whole->data_offset() + last.offset + last.n_bytes, bytes.size());
    for (size_t len = 0; len < bytes.size(); ++len) {
      // A copy of exactly `len` bytes, so ASan would catch a read past the end.
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
      auto r = parse(cut);
      ASSERT_TRUE(fails_with(r, "bad.gguf: ", "")) << "v" << version << " prefix " << len;
      EXPECT_TRUE(r.status().message().find("truncated") != std::string::npos ||
                  r.status().message().find("too short") != std::string::npos)
          << r.status().message();
      EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
    }
  }
}

TEST(GgufBadInput, WrongMagic) {
  std::vector<uint8_t> b = one_tensor_file(0);
  std::memcpy(b.data(), "GGML", 4);
  EXPECT_TRUE(fails_with(parse(b), "bad.gguf: ", "not a GGUF file: bad magic"));
  std::vector<uint8_t> tiny = {'G', 'G'};
  EXPECT_TRUE(fails_with(parse(tiny), "bad.gguf: ", "too short"));
}

TEST(GgufBadInput, UnsupportedVersion) {
  RawGguf g(4);
  g.header(0, 0);
  auto r = parse(g.bytes);
  EXPECT_TRUE(fails_with(r, "bad.gguf: ", "unsupported GGUF version 4"));
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  RawGguf zero(0);
  zero.header(0, 0);
  EXPECT_TRUE(fails_with(parse(zero.bytes), "bad.gguf: ", "unsupported GGUF version 0"));
}

TEST(GgufBadInput, BigEndianVersion) {
  RawGguf g(3u << 24);
  g.header(0, 0);
  EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ", "big-endian"));
}

TEST(GgufBadInput, AbsurdTensorCount) {
  RawGguf g;
  g.header(uint64_t{1} << 60, 0).zeros(64);
  EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ", "tensor count 1152921504606846976 cannot fit"));
}

TEST(GgufBadInput, AbsurdKeyCount) {
  RawGguf g;
  g.header(0, ~uint64_t{0}).zeros(64);
  EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ", "metadata key/value count"));
}

TEST(GgufBadInput, AbsurdStringLength) {
  RawGguf g;
  g.header(0, 1).u64(uint64_t{1} << 62).zeros(64);
  EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ", "key of metadata entry 0 at offset 32 claims 4611686018427387904 bytes"));
  RawGguf v;
  v.header(0, 1).str("k").u32(8).u64(~uint64_t{0}).zeros(16);
  EXPECT_TRUE(fails_with(parse(v.bytes), "bad.gguf: ", "value of key 'k'"));
}

TEST(GgufBadInput, AbsurdArrayCount) {
  RawGguf g;
  g.header(0, 1).str("arr").u32(9).u32(4).u64(uint64_t{1} << 61).zeros(64);
  EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ", "array key 'arr' claims 2305843009213693952 elements of u32"));
  RawGguf s;
  s.header(0, 1).str("arr").u32(9).u32(8).u64(uint64_t{1} << 40).zeros(64);
  EXPECT_TRUE(fails_with(parse(s.bytes), "bad.gguf: ", "array key 'arr' claims 1099511627776 elements of string"));
}

TEST(GgufBadInput, OffsetPastEndOfFile) {
  EXPECT_TRUE(fails_with(parse(one_tensor_file(32 * 1024)), "bad.gguf: ",
                         "truncated: tensor info 0 ('t') data [32832, 32864) extends past end of file (32864 > 96 bytes)"));
  // Within the file but running off its end.
  EXPECT_TRUE(fails_with(parse(one_tensor_file(32)), "bad.gguf: ", "extends past end of file"));
  // An offset so large that offset + size would wrap around.
  EXPECT_TRUE(fails_with(parse(one_tensor_file(~uint64_t{31})), "bad.gguf: ", "extends past end of file"));
}

TEST(GgufBadInput, MisalignedOffset) {
  EXPECT_TRUE(fails_with(parse(one_tensor_file(4)), "bad.gguf: ",
                         "tensor info 0 ('t') has data offset 4, not a multiple of the alignment 32"));
}

TEST(GgufBadInput, BadAlignmentValue) {
  for (uint32_t align : {0u, 3u, 48u}) {
    RawGguf g;
    g.header(0, 1).kv_u32("general.alignment", align);
    EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ",
                           "general.alignment is " + std::to_string(align) + ", which is not a nonzero power of two"));
  }
  RawGguf wrong_type;
  wrong_type.header(0, 1).str("general.alignment").u32(10).u64(64);
  EXPECT_TRUE(fails_with(parse(wrong_type.bytes), "bad.gguf: ", "general.alignment has type u64, expected u32"));
}

TEST(GgufBadInput, CustomAlignmentIsHonoured) {
  RawGguf g;
  g.header(1, 1).kv_u32("general.alignment", 64).tensor_info("t", {16}, kF32, 0).pad(64).zeros(64);
  auto f = parse(g.bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  RawGguf mis;
  mis.header(1, 1).kv_u32("general.alignment", 64).tensor_info("t", {8}, kF32, 32).pad(64).zeros(128);
  EXPECT_TRUE(fails_with(parse(mis.bytes), "bad.gguf: ", "not a multiple of the alignment 64"));
}

TEST(GgufBadInput, TooManyDims) {
  EXPECT_TRUE(fails_with(parse(one_tensor_file(0, kF32, {8, 1, 1, 1, 1})), "bad.gguf: ",
                         "tensor info 0 ('t') has 5 dimensions; at most 4 are allowed"));
}

TEST(GgufBadInput, NegativeDimension) {
  EXPECT_TRUE(fails_with(parse(one_tensor_file(0, kF32, {~uint64_t{0}})), "bad.gguf: ", "negative or huge dimension ne[0] = -1"));
}

TEST(GgufBadInput, ElementCountOverflow) {
  const uint64_t big = uint64_t{1} << 32;
  EXPECT_TRUE(fails_with(parse(one_tensor_file(0, kF32, {big, big, big})), "bad.gguf: ", "overflows 64 bits"));
  // Fits in int64 elements but not in bytes of the file.
  EXPECT_TRUE(fails_with(parse(one_tensor_file(0, kF32, {uint64_t{1} << 30, uint64_t{1} << 30})), "bad.gguf: ",
                         "of type F32 needs 4611686018427387904 bytes, more than the whole file (128 bytes)"));
  EXPECT_TRUE(fails_with(parse(one_tensor_file(0, kF32, {uint64_t{1} << 31, uint64_t{1} << 31})), "bad.gguf: ",
                         "of type F32 needs over 2^64 bytes"));
}

TEST(GgufBadInput, RowNotAMultipleOfBlockSize) {
  EXPECT_TRUE(fails_with(parse(one_tensor_file(0, kQ8_0, {20})), "bad.gguf: ",
                         "of type Q8_0 has ne[0] = 20, not a multiple of its block size 32"));
}

TEST(GgufBadInput, DuplicateTensorName) {
  RawGguf g;
  g.header(2, 0).tensor_info("w", {8}, kF32, 0).tensor_info("w", {8}, kF32, 32).pad().zeros(64);
  EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ", "duplicate tensor name 'w'"));
}

TEST(GgufBadInput, DuplicateKey) {
  RawGguf g;
  g.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
  EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ", "duplicate metadata key 'k'"));
}

TEST(GgufBadInput, UnknownValueType) {
  RawGguf g;
  g.header(0, 1).str("k").u32(13).u32(0);
  auto r = parse(g.bytes);
  EXPECT_TRUE(fails_with(r, "bad.gguf: ", "key 'k' has unknown value type id 13"));
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  RawGguf elem;
  elem.header(0, 1).str("k").u32(9).u32(99).u64(0);
  EXPECT_TRUE(fails_with(parse(elem.bytes), "bad.gguf: ", "array key 'k' has unknown element type id 99"));
  RawGguf nested;
  nested.header(0, 1).str("k").u32(9).u32(9).u64(0);
  EXPECT_TRUE(fails_with(parse(nested.bytes), "bad.gguf: ", "array of arrays"));
}

TEST(GgufBadInput, UnknownTensorTypeIsListedWithoutSize) {
  // The reader lists tensors of any type (for `gguf info`); only the model loader rejects them.
  auto f = parse(one_tensor_file(0, 99, {8}));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->tensors()[0].type_id, 99u);
  EXPECT_EQ(f->tensors()[0].n_bytes, 0u);
  EXPECT_TRUE(fails_with(parse(one_tensor_file(64, 99, {8})), "bad.gguf: ", "extends past end of file"));
  // A known but unsupported type (Q5_K = 13) gets its size.
  auto q5 = parse(one_tensor_file(0, 13, {256}));
  EXPECT_TRUE(fails_with(q5, "bad.gguf: ", "of type Q5_K needs 176 bytes, more than the whole file (96 bytes)"));
  auto q5_ok = parse(one_tensor_file(0, 13, {64}));  // Q5_K needs ne[0] % 256 == 0
  EXPECT_TRUE(fails_with(q5_ok, "bad.gguf: ", "not a multiple of its block size 256"));
}

TEST(GgufBadInput, ControlBytesInNamesArePrintedSafely) {
  RawGguf g;
  g.header(0, 2).kv_u32(std::string("a\nb\x01", 4), 1).kv_u32(std::string("a\nb\x01", 4), 1);
  EXPECT_TRUE(fails_with(parse(g.bytes), "bad.gguf: ", "duplicate metadata key 'a?b?'"));
}

TEST(GgufBadInput, MissingAndEmptyFiles) {
  EXPECT_TRUE(fails_with(GgufFile::open("/nonexistent/dir/x.gguf"), "/nonexistent/dir/x.gguf: ",
                         "No such file or directory"));
  EXPECT_EQ(GgufFile::open("/nonexistent/dir/x.gguf").status().code(), StatusCode::kNotFound);
  const testing_util::TempDir dir;  // removed with the file at the end
  const std::string empty = dir.path() + "/empty.gguf";
  FILE* fp = std::fopen(empty.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  std::fclose(fp);
  auto m = MappedFile::open(empty);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ((*m)->size(), 0u);
  EXPECT_EQ((*m)->data(), nullptr);
  EXPECT_TRUE(fails_with(GgufFile::open(empty), empty + ": ", "0 bytes is too short"));
  EXPECT_TRUE(fails_with(GgufFile::open(::testing::TempDir()), ::testing::TempDir(), "not a regular file"));
}

}  // namespace
}  // namespace leoam
