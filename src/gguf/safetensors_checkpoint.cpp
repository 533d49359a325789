#include "gguf/safetensors_checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "gguf/json_file.h"
#include "gguf/quoted_name.h"

namespace leoam {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The index's weight_map: tensor name -> shard file name (a plain name in the folder).
Result<std::map<std::string, std::string>> read_weight_map(const std::string& path) {
  LEOAM_ASSIGN_OR_RETURN(const json index, read_json_object(path));
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    return corrupt(path + ": no \"weight_map\" object (tensor name to shard file)");
  }
  std::map<std::string, std::string> map;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) return corrupt(path + ": the shard of tensor " + quoted_name(tensor) + " is not a file name");
    const std::string file = shard.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return corrupt(path + ": the shard of tensor " + quoted_name(tensor) + ", " + quoted_name(file) +
                     ", is not a file in the folder");
    }
    map.emplace(tensor, file);
  }
  if (map.empty()) return corrupt(path + ": \"weight_map\" names no tensor");
  return map;
}

}  // namespace

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& dir) {
  SafetensorsCheckpoint c;
  const std::string index_path = (fs::path(dir) / kSafetensorsIndexFile).string();
  const std::string single_path = (fs::path(dir) / kSafetensorsSingleFile).string();
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec)) {
      return not_found(dir + ": neither " + kSafetensorsSingleFile + " nor " + kSafetensorsIndexFile);
    }
    LEOAM_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(single_path));
    c.shards_.push_back(std::move(file));
  } else {
    LEOAM_ASSIGN_OR_RETURN(const auto weight_map, read_weight_map(index_path));
    std::set<std::string> names;
    for (const auto& [tensor, shard] : weight_map) names.insert(shard);
    for (const std::string& name : names) {
      LEOAM_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open((fs::path(dir) / name).string()));
      for (const SafetensorsTensor& t : file.tensors()) {
        const auto it = weight_map.find(t.name);
        if (it == weight_map.end() || it->second != name) {
          return corrupt(file.path() + ": holds tensor " + quoted_name(t.name) + ", which " + kSafetensorsIndexFile +
                         (it == weight_map.end() ? " does not name" : " puts in " + it->second));
        }
      }
      c.shards_.push_back(std::move(file));
    }
    // Each shard's tensors were all in the index, in that shard; the index's must all be there.
    std::map<std::string, const SafetensorsFile*> by_shard;
    for (const SafetensorsFile& f : c.shards_) by_shard.emplace(fs::path(f.path()).filename().string(), &f);
    for (const auto& [tensor, shard] : weight_map) {
      if (by_shard.at(shard)->find(tensor) == nullptr) {
        return corrupt(index_path + ": names tensor " + quoted_name(tensor) + " in " + shard + ", which does not hold it");
      }
    }
  }
  for (const SafetensorsFile& f : c.shards_) {
    for (const SafetensorsTensor& t : f.tensors()) c.by_name_.emplace(t.name, &t);
  }
  return c;
}

const SafetensorsTensor* SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const SafetensorsTensor*> SafetensorsCheckpoint::tensors() const {
  std::vector<const SafetensorsTensor*> all;
  for (const SafetensorsFile& f : shards_) {
    for (const SafetensorsTensor& t : f.tensors()) all.push_back(&t);
  }
  return all;
}

}  // namespace leoam
