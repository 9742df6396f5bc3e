// Byte-string helpers the services need to put arbitrary bytes into JSON (which must be UTF-8).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace deskbox::services::text {

// Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view bytes);

// Valid UTF-8 copy: each maximal invalid subsequence becomes U+FFFD.
std::string to_valid_utf8(std::string_view bytes);

// Length of `bytes` without a trailing incomplete (but so far valid) UTF-8 sequence, so a
// buffer cut at a size limit does not end in a broken character.
std::size_t trim_partial_utf8(std::string_view bytes);

std::string base64_encode(std::string_view bytes);

// ISO 8859-1 (the X STRING encoding) <-> UTF-8. Characters outside Latin-1 become '?'.
std::string latin1_to_utf8(std::string_view latin1);
std::string utf8_to_latin1(std::string_view utf8);

}  // namespace deskbox::services::text
