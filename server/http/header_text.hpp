// Header values as text: HTTP compares media types, host names and origins case-insensitively
// and ignores blanks around a value.
#pragma once

#include <string>
#include <string_view>

#include "common/ascii.hpp"

namespace deskbox::server {

inline std::string ascii_lowercase(std::string_view text) {
    std::string out(text);
    for (char& c : out) c = ascii_lower(c);
    return out;
}

// Without the spaces and tabs HTTP allows around a header value.
inline std::string_view trim_blanks(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    return text;
}

}  // namespace deskbox::server
