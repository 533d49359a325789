// Converts a tensor bundle (a JSON manifest plus one raw float32 file, as the Python training
// script writes) into GGUF metadata and tensors, through GgufWriter.
//
// Manifest (UTF-8 JSON; every field below is required unless marked optional, and any other
// field is an error, so that a misspelt "dtype" cannot silently mean f32):
//
//   {
//     "format": "leoam-tensor-bundle",
//     "version": 1,
//     "data": "weights.f32",
//     "metadata": [ {"key": "general.architecture", "type": "str", "value": "llama"},
//                   {"key": "llama.block_count",    "type": "u32", "value": 4},
//                   {"key": "tokenizer.ggml.tokens", "type": "arr_str", "value": ["<unk>", "a"]}, ... ],
//     "tensors":  [ {"name": "token_embd.weight", "shape": [258, 256], "offset": 0, "type": "f16"}, ... ]
//   }
//
// data      path of the raw float32 file, relative to the manifest's directory (or absolute).
// metadata  written in this order. "type" is one of
//             u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str
//           or "arr_" followed by one of those (arr_u32 arr_i32 arr_f32 arr_str ...), whose
//           "value" is a JSON array (possibly empty) of such elements. Integer types take JSON
//           integer literals only ("4", not "4.0"), range-checked against the type; f32/f64 take
//           any JSON number (an f32 must fit in a float); bool takes true/false; str a string.
//           A key may appear once.
// tensors   written in this order; names are unique, 1 to 63 bytes.
//           shape   numpy order, outermost first, 1 to 4 dimensions, each > 0. GGUF's ne is the
//                   reverse: numpy [258, 256] is ne = {256, 258}, rows of 256 values.
//           offset  byte offset into the data file of the tensor's prod(shape) little-endian
//                   float32 values (C order); a multiple of 4, and the values must lie inside
//                   the file. Tensors may share bytes.
//           type    optional, default "f32": the type stored in the GGUF, one of
//                   f32 f16 bf16 q8_0 q4_0 q4_k q6_k. The values are converted (quantized) by
//                   GgufWriter::add_tensor_f32; for the block types the last shape dimension
//                   must be a multiple of the block size (32 for q8_0/q4_0, 256 for q4_k/q6_k).
//
// Every value of every tensor must be finite, and an f16 tensor's values must fit in f16
// (|v| <= 65504): the training script is expected to hand over usable weights, and a NaN found
// here is far cheaper to diagnose than one found by the forward pass.
//
// Contract: the whole manifest and all tensor data are checked before anything is added to
// `out`, so on an error `out` is unchanged (except when a tensor name clashes with one the
// caller had already added to `out`). Errors name the manifest, or the data file for problems
// with the data itself, and say what is wrong: "m.json: tensors[2] ('blk.0.attn_q.weight'):
// offset 6 is not a multiple of 4".
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
