// libFuzzer target for the GGUF reader: any byte string must parse or fail with a Status,
// never crash, read out of bounds or allocate without bound. On success, touch everything a
// caller could: every tensor byte, every value's display form, the typed look-ups and the
// `gguf info` printer.
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "gguf/gguf_file.h"
#include "gguf/gguf_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = leoam::GgufFile::parse("fuzz.gguf", data, size);
  if (!file.is_ok()) return 0;
  uint8_t sum = 0;
  for (const leoam::GgufTensorInfo& t : file->tensors()) {
    for (size_t i = 0; i < t.n_bytes; ++i) sum ^= t.data[i];
    (void)t.n_elements();
  }
  for (const auto& [key, value] : file->metadata()) {
    (void)value.to_display_string();
    (void)value.to_f32s();
    (void)value.to_i32s();
    (void)file->get_int(key);
    (void)file->get_float(key);
    (void)file->get_bool(key);
    (void)file->get_string(key);
  }
  std::ostringstream out;
  leoam::print_gguf_info(*file, out);
  // Keep the byte reads from being optimized away.
  volatile uint8_t sink = sum;
  (void)sink;
  return 0;
}
