#include "guest-desktop/services/text.hpp"

#include <cstdint>

#include "common/utf8.hpp"

namespace deskbox::services::text {
std::string utf8_to_latin1(std::string_view utf8) {
    std::string out;
    out.reserve(utf8.size());
    for (std::size_t i = 0; i < utf8.size();) {
        std::size_t n = utf8::sequence_length(utf8, i);
        if (n == 0) {
            out += '?';
            ++i;
            continue;
        }
        std::uint32_t cp = static_cast<std::uint8_t>(utf8[i]);
        if (n == 2) cp = (cp & 0x1F) << 6 | (static_cast<std::uint8_t>(utf8[i + 1]) & 0x3F);
        out += (n <= 2 && cp < 0x100) ? static_cast<char>(cp) : '?';
        i += n;
    }
    return out;
}

}  // namespace deskbox::services::text
