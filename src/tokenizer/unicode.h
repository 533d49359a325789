// UTF-8 helpers and GPT-2's byte-to-unicode table, shared by the SPM and BPE tokenizers.
//
// Decoding is lenient the way llama.cpp's is: a lead byte announces the length of its sequence
// (1-4 bytes, a stray continuation byte counts as 1) and the tokenizers cut text into symbols by
// that length alone, so invalid UTF-8 still tokenizes (as byte tokens) instead of failing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace leoam::unicode {

// Length of the UTF-8 sequence that starts with `lead` (1..4); 1 for a continuation byte.
size_t utf8_len(uint8_t lead);

// Decodes the code point at text[*pos] and advances *pos past it. An invalid or truncated
// sequence gives U+FFFD and advances by one byte.
uint32_t decode_utf8(std::string_view text, size_t* pos);

// Appends the UTF-8 encoding of code point `cp` to `out`.
void append_utf8(uint32_t cp, std::string* out);

// Length of the valid UTF-8 sequence at text[pos] (strict: no overlong forms, surrogates or
// code points above U+10FFFF), or 0 when the bytes there are not valid UTF-8.
size_t valid_utf8_len(std::string_view text, size_t pos);
bool is_valid_utf8(std::string_view text);
// `text` in Unicode normalization form C (ICU's NFC), as a tokenizer.json "NFC" normalizer
// applies it; invalid UTF-8 is first sanitized as below. ASCII text is returned as it is.
std::string nfc(std::string_view text);
// Replaces every invalid UTF-8 byte by U+FFFD (as llama.cpp's decoder does before it splits
// text with regexes), so that regex engines always see valid UTF-8.
std::string sanitize_utf8(std::string_view text);

// GPT-2 byte-level BPE maps every byte to a printable code point: bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF map to themselves; the other 68 bytes map, in increasing order, to U+0100.. U+0143.
// So ' ' becomes 'Ġ' (U+0120) and '\n' becomes 'Ċ' (U+010A).
uint32_t byte_to_codepoint(uint8_t b);
// The inverse; -1 for a code point that no byte maps to.
int codepoint_to_byte(uint32_t cp);

// The UTF-8 text of byte `b` under the table above (one or two bytes).
const std::string& byte_to_utf8(uint8_t b);

// Applies byte_to_codepoint to every byte of `bytes`.
std::string bytes_to_bpe_text(std::string_view bytes);

// Undoes bytes_to_bpe_text; code points outside the table are copied through unchanged.
std::string bpe_text_to_bytes(std::string_view text);

}  // namespace leoam::unicode
