// Base64 (RFC 4648, with padding) for images and bytes in JSON answers and requests.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace deskbox {

std::string base64_encode(std::span<const std::uint8_t> bytes);
inline std::string base64_encode(std::string_view bytes) {
    return base64_encode(
        std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
}
// nullopt unless `text` is base64 (padding optional; ASCII whitespace, as in line-wrapped
// base64, is skipped).
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace deskbox
