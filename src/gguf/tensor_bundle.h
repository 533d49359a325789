// Converts a tensor bundle (a JSON manifest plus one raw float32 file, as the Python training
// script writes) into GGUF metadata and tensors, through GgufWriter. The manifest names the data
// file, the metadata (in order, typed, each key once) and the tensors (in order, unique names,
// numpy shapes, byte offsets into the data, an optional stored type); any other field is an
// error, so that a misspelt "dtype" cannot silently mean f32. Every value must be finite (and fit
// in f16 for an f16 tensor). Contract: everything is checked before anything is added to `out`,
// so on an error `out` is unchanged (unless a tensor name clashes with one the caller had added).
// Errors name the manifest, or the data file for problems with the data, and say what is wrong:
// "m.json: tensors[2] ('blk.0.attn_q.weight'): offset 6 is not a multiple of 4".
// The manifest field by field: docs/model.md#tensor-bundles
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "gguf/gguf_value.h"

namespace leoam {

class GgufWriter;

// "leoam-tensor-bundle": the manifest's "format" field.
inline constexpr const char* kTensorBundleFormat = "leoam-tensor-bundle";
// The one manifest version this build reads.
inline constexpr int kTensorBundleVersion = 1;

// Reads the manifest at `manifest_path` and the data file it names, and adds the bundle's
// metadata and tensors to `out` (which the caller then writes).
Status import_tensor_bundle(const std::string& manifest_path, GgufWriter& out);

// One metadata value in the manifest's syntax: `type_name` as a metadata entry's "type" (u32,
// f32, str, arr_i32...) and `json_text` its "value" as JSON text ("1536", "\"text\"", "[1, 2]").
// The error says why the value does not fit the type.
Result<GgufValue> parse_metadata_value(std::string_view type_name, std::string_view json_text);

}  // namespace leoam
