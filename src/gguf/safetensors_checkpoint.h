// A Hugging Face checkpoint's tensors as a folder holds them: one model.safetensors, or the shards
// that model.safetensors.index.json maps each tensor to. Every shard is mapped and checked
// (safetensors_file.h); the index and the shards must agree: a tensor the index names must be in
// the shard it names, and every tensor of a shard must be in the index, in that shard.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/safetensors_file.h"

namespace leoam {

inline constexpr const char* kSafetensorsSingleFile = "model.safetensors";
inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";

class SafetensorsCheckpoint {
 public:
  // Opens the checkpoint in folder `dir`: its index and shards, or its single file.
  static Result<SafetensorsCheckpoint> open(const std::string& dir);

  // nullptr when no shard holds a tensor of that name.
  const SafetensorsTensor* find(std::string_view name) const;
  // Every tensor, shard by shard (in the order of the shards' names), each in its data's order.
  std::vector<const SafetensorsTensor*> tensors() const;
  const std::vector<SafetensorsFile>& shards() const { return shards_; }

 private:
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> by_name_;
};

}  // namespace leoam
