// Copies a GGUF file with some metadata keys set: what llama.cpp's gguf_new_metadata.py does, for
// a model whose weights stay as they are and whose metadata changes (a new key the engine reads,
// a corrected value). Tensors are copied byte for byte, in file order.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"
#include "gguf/gguf_value.h"

namespace leoam {

class GgufFile;
class GgufWriter;

using GgufKeyValue = std::pair<std::string, GgufValue>;

// Adds `in`'s metadata, with each key of `set` replacing the file's value in place or, when the
// file has no such key, appended after the others, and then `in`'s tensors to `out`. Fails (with
// `out` holding part of the copy) on a tensor type GgufWriter cannot write.
Status copy_with_metadata(const GgufFile& in, std::span<const GgufKeyValue> set, GgufWriter& out);

// "KEY=TYPE:VALUE" (e.g. "leoam.attention.logn_length=u32:1536") as a key and its value. TYPE and
// VALUE are as a tensor bundle's metadata entry spells them (gguf/tensor_bundle.h), except that a
// str VALUE is the text itself, unquoted.
Result<GgufKeyValue> parse_key_assignment(std::string_view text);

}  // namespace leoam
