// libFuzzer target for the safetensors reader: any byte string must parse or fail with a Status,
// never crash, read out of bounds or allocate without bound. On success, touch every tensor byte
// and every metadata entry, as a loader would.
#include <cstddef>
#include <cstdint>

#include "gguf/safetensors_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = leoam::SafetensorsFile::parse("fuzz.safetensors", data, size);
  if (!file.is_ok()) return 0;
  uint8_t sum = 0;
  for (const leoam::SafetensorsTensor& t : file->tensors()) {
    for (size_t i = 0; i < t.n_bytes; ++i) sum ^= t.data[i];
    (void)t.n_elements();
    if (file->find(t.name) == nullptr) __builtin_trap();
  }
  for (const auto& [key, value] : file->metadata()) sum ^= static_cast<uint8_t>(key.size() + value.size());
  return sum == 0x100 ? 1 : 0;  // never: keeps the reads from being optimized away
}
