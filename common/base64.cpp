#include "common/base64.hpp"

#include <boost/beast/core/detail/base64.hpp>

namespace deskbox {

namespace b64 = boost::beast::detail::base64;

std::string base64_encode(std::span<const std::uint8_t> bytes) {
    std::string out(b64::encoded_size(bytes.size()), '\0');
    out.resize(b64::encode(out.data(), bytes.data(), bytes.size()));
    return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
    std::string compact;
    compact.reserve(text.size());
    for (char c : text)
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') compact.push_back(c);
    // Unpadded base64 (as some encoders write it) gets its padding back: Beast needs it.
    if (compact.find('=') == std::string::npos) {
        if (compact.size() % 4 == 1) return std::nullopt;
        compact.append((4 - compact.size() % 4) % 4, '=');
    }
    // Beast stops at the first character that is not base64 and reports how far it read; only
    // trailing padding may follow.
    std::string out(b64::decoded_size(compact.size()), '\0');
    auto [written, read] = b64::decode(out.data(), compact.data(), compact.size());
    std::size_t padding = 0;
    while (read + padding < compact.size() && compact[read + padding] == '=' && padding < 2)
        ++padding;
    if (read + padding != compact.size() || (padding && (read + padding) % 4 != 0))
        return std::nullopt;
    out.resize(written);
    return out;
}

}  // namespace deskbox
