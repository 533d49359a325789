// Writes a few tiny valid GGUF files into the directory given as argv[1]: the fuzzer's seeds.
// They cover every GGUF version, every value type and every supported tensor type.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"

namespace {

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.5f * static_cast<float>(i));
  return v;
}

bool write(const leoam::GgufWriter& w, const std::string& path) {
  const leoam::Status s = w.write(path);
  if (!s.is_ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return s.is_ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  using leoam::GgmlType;
  using leoam::GgufValue;
  using leoam::GgufValueType;
  bool ok = true;

  {  // v3: every scalar type, small arrays, three tensor types
    leoam::GgufWriter w(3);
    w.set("general.architecture", GgufValue::from_string("llama"));
    w.set("u8", GgufValue::from_u8(1));
    w.set("i8", GgufValue::from_i8(-1));
    w.set("u16", GgufValue::from_u16(2));
    w.set("i16", GgufValue::from_i16(-2));
    w.set("u32", GgufValue::from_u32(3));
    w.set("i32", GgufValue::from_i32(-3));
    w.set("u64", GgufValue::from_u64(4));
    w.set("i64", GgufValue::from_i64(-4));
    w.set("f32", GgufValue::from_f32(0.5f));
    w.set("f64", GgufValue::from_f64(0.25));
    w.set("bool", GgufValue::from_bool(true));
    w.set("tokens", GgufValue::from_strings({"<unk>", "<s>", "a"}));
    w.set("scores", GgufValue::from_f32s({0, -1, -2}));
    w.set("types", GgufValue::from_i32s({2, 3, 1}));
    w.set("u8s", GgufValue::from_raw(GgufValueType::kU8, true, {1, 2, 3}));
    ok &= w.add_tensor_f32("a", GgmlType::kF32, {4, 2}, ramp(8)).is_ok();
    ok &= w.add_tensor_f32("b", GgmlType::kF16, {8}, ramp(8)).is_ok();
    ok &= w.add_tensor_f32("c", GgmlType::kQ8_0, {32}, ramp(32)).is_ok();
    ok &= write(w, dir + "/v3_values.gguf");
  }
  {  // v2: Q4_0 and BF16, a custom alignment
    leoam::GgufWriter w(2);
    w.set("general.alignment", GgufValue::from_u32(64));
    w.set("name", GgufValue::from_string("v2"));
    ok &= w.add_tensor_f32("q4", GgmlType::kQ4_0, {32, 2}, ramp(64)).is_ok();
    ok &= w.add_tensor_f32("bf", GgmlType::kBF16, {3}, ramp(3)).is_ok();
    ok &= write(w, dir + "/v2_align64.gguf");
  }
  {  // v1: 32-bit counts
    leoam::GgufWriter w(1);
    w.set("general.name", GgufValue::from_string("v1"));
    w.set("ids", GgufValue::from_u32s({1, 2}));
    ok &= w.add_tensor_f32("x", GgmlType::kF32, {2, 2, 1, 1}, ramp(4)).is_ok();
    ok &= write(w, dir + "/v1_small.gguf");
  }
  {  // K-quants: one super-block each
    leoam::GgufWriter w(3);
    ok &= w.add_tensor_f32("q4k", GgmlType::kQ4_K, {256}, ramp(256)).is_ok();
    ok &= w.add_tensor_f32("q6k", GgmlType::kQ6_K, {256}, ramp(256)).is_ok();
    ok &= write(w, dir + "/v3_kquants.gguf");
  }
  {  // metadata only, like llama.cpp's vocab files
    leoam::GgufWriter w(3);
    w.set("tokenizer.ggml.model", GgufValue::from_string("gpt2"));
    w.set("tokenizer.ggml.merges", GgufValue::from_strings({"a b", "ab c"}));
    ok &= write(w, dir + "/v3_no_tensors.gguf");
  }
  return ok ? 0 : 1;
}
