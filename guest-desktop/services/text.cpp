#include "guest-desktop/services/text.hpp"

#include <cstdint>

#include "common/utf8.hpp"

namespace deskbox::services::text {
namespace {

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

}  // namespace

std::string latin1_to_utf8(std::string_view latin1) {
    std::string out;
    out.reserve(latin1.size());
    for (char c : latin1) append_utf8(out, static_cast<std::uint8_t>(c));
    return out;
}

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
