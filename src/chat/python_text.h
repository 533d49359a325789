// Python's str semantics on UTF-8 text, as chat templates see them: strings are sequences of code
// points (len, indexing, slicing count code points), whitespace is str.isspace()'s, and printing
// follows str() and repr(). Case mapping covers ASCII only; other letters keep their case.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leoam::chat::py {

// The code point at byte `i` and its length in bytes; a malformed byte reads as itself, length 1.
uint32_t decode_code_point(std::string_view s, size_t i, size_t* n_bytes);
void append_code_point(std::string& out, uint32_t cp);
// Byte offsets of each code point's start, then s.size(): [n_code_points + 1].
std::vector<size_t> code_point_offsets(std::string_view s);
size_t count_code_points(std::string_view s);

bool is_space(uint32_t cp);  // str.isspace()
// str.isspace(), isdigit(), isalpha(), isalnum(), islower(), isupper(): false for "". Code points
// beyond ASCII count as letters unless they are whitespace.
bool is_space_text(std::string_view s);
bool is_digit_text(std::string_view s);
bool is_alpha_text(std::string_view s);
bool is_alnum_text(std::string_view s);
bool is_lower_text(std::string_view s);
bool is_upper_text(std::string_view s);

// str.strip / lstrip / rstrip: `chars` unset strips whitespace, else any code point in chars.
std::string_view strip(std::string_view s, const std::optional<std::string_view>& chars, bool left, bool right);
// str.split / rsplit: `sep` unset splits on whitespace runs; max_split < 0 means no limit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string_view>& sep, int64_t max_split,
                               bool from_right);
std::vector<std::string> split_lines(std::string_view s);  // str.splitlines(), ends dropped
std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count);
int64_t count_occurrences(std::string_view s, std::string_view sub);  // str.count (in code points' terms)

std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);       // str.title

std::string repr_string(std::string_view s);  // repr(str): 'it' or "it's", with Python's escapes
std::string format_float(double d);           // repr(float): 1.0, 0.1, 1e+16, 1e-05, inf, nan

}  // namespace leoam::chat::py
