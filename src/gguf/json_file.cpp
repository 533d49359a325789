#include "gguf/json_file.h"

#include <fstream>
#include <sstream>

namespace leoam {

Result<nlohmann::json> read_json_object(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return io_error(path + ": read error");
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt(path + ": not valid JSON");
  if (!j.is_object()) return corrupt(path + ": not a JSON object");
  return j;
}

}  // namespace leoam
