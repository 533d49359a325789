// Human-readable description of a GGUF file, for `leoam gguf info FILE`: header, every metadata
// key with its type and value (long arrays abbreviated), then a tensor table and totals.
#pragma once

#include <ostream>

namespace leoam {

class GgufFile;

void print_gguf_info(const GgufFile& file, std::ostream& out);

}  // namespace leoam
