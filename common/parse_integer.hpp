// Strict decimal integer parsing for flags and query parameters: the whole text must be a
// number ("12abc", "", " 3" and out-of-range values are refused).
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace deskbox {

inline std::optional<long long> parse_integer(std::string_view text) {
    long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
}

}  // namespace deskbox
