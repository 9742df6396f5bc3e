// ASCII case-insensitive comparison of protocol tokens (HTTP methods, header values, schemes).
// Not Beast's iequals: Boost 1.74's reads one byte past both ends when the last characters
// differ only in case (found by egress_parsers_fuzz under ASan).
#pragma once

#include <algorithm>
#include <string_view>

namespace deskbox {

inline char ascii_lower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

inline bool ascii_iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return ascii_lower(x) == ascii_lower(y);
           });
}

}  // namespace deskbox
