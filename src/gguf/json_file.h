// A JSON file whose top level is an object, as the files beside a model are (a safetensors
// index, config.json, tokenizer.json): read whole and parsed without exceptions. A file that
// cannot be opened is not_found; one that is not JSON, or not an object, is corrupt; each error
// names the path.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace leoam {

Result<nlohmann::json> read_json_object(const std::string& path);

}  // namespace leoam
