#include "gguf/gguf_edit.h"

#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/tensor_bundle.h"

namespace leoam {

Status copy_with_metadata(const GgufFile& in, std::span<const GgufKeyValue> set, GgufWriter& out) {
  // GgufWriter::set replaces a key where it first appeared, so the file's order is kept.
  for (const auto& [key, value] : in.metadata()) out.set(key, value);
  for (const auto& [key, value] : set) out.set(key, value);
  for (const GgufTensorInfo& t : in.tensors()) {
    const Status st = out.add_tensor(t.name, t.type(), t.ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    if (!st.is_ok()) return st.with_context(in.path());
  }
  return Status::ok();
}

Result<GgufKeyValue> parse_key_assignment(std::string_view text) {
  const size_t eq = text.find('=');
  const size_t colon = eq == std::string_view::npos ? eq : text.find(':', eq + 1);
  if (eq == 0 || colon == std::string_view::npos) {
    std::string message = "'";
    message.append(text).append("' is not KEY=TYPE:VALUE (e.g. general.name=str:my-model)");
    return invalid_argument(std::move(message));
  }
  const std::string key(text.substr(0, eq));
  const std::string_view type = text.substr(eq + 1, colon - eq - 1);
  const std::string_view value = text.substr(colon + 1);
  if (type == "str") return GgufKeyValue{key, GgufValue::from_string(std::string(value))};
  Result<GgufValue> v = parse_metadata_value(type, value);
  if (!v.is_ok()) return invalid_argument(key + ": " + v.status().message());
  return GgufKeyValue{key, std::move(*v)};
}

}  // namespace leoam
