// UTF-8 checks for bytes that must go into JSON (which is UTF-8 only): what the guest reads
// (command output, window titles, file names) and what a client sends. Strict: no overlongs,
// no surrogates, nothing above U+10FFFF.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace deskbox::utf8 {

bool is_valid(std::string_view bytes);

// Offset of the first byte that does not start a valid sequence; nullopt when all are valid.
std::optional<std::size_t> first_invalid(std::string_view bytes);

// The code points of `bytes`, strictly decoded; nullopt if any sequence is invalid or cut off,
// and then *error_offset (when given) is where the first bad one starts, as first_invalid says.
std::optional<std::u32string> code_points(std::string_view bytes,
                                          std::size_t* error_offset = nullptr);

// ISO 8859-1 (X's STRING, RFB's classic cut text) as UTF-8.
std::string from_latin1(std::string_view latin1);

// Valid UTF-8 copy: each maximal invalid subsequence becomes U+FFFD.
std::string to_valid(std::string_view bytes);

// Valid UTF-8 copy that keeps what it cannot represent: each invalid byte becomes the text
// \xHH (and a backslash stays a backslash), so an audit line or an error message still says
// which bytes came.
std::string escape_invalid(std::string_view bytes);

// `value` with every string and key passed through escape_invalid, so dump() cannot throw.
nlohmann::json escape_invalid_in(const nlohmann::json& value);

// Length of `bytes` without a trailing incomplete (but so far valid) sequence, so a buffer
// cut at a size limit does not end in a broken character.
std::size_t trim_partial(std::string_view bytes);

// Length of the valid sequence starting at bytes[i], or 0 if it is invalid or cut off.
// `partial` is set when the bytes so far are a valid prefix that the input ends inside.
std::size_t sequence_length(std::string_view bytes, std::size_t i, bool* partial = nullptr);

}  // namespace deskbox::utf8
