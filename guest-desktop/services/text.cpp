#include "guest-desktop/services/text.hpp"

#include <cstdint>

namespace deskbox::services::text {
namespace {

// Length of the valid UTF-8 sequence starting at bytes[i], or 0 if it is invalid or cut off.
// `partial` is set when the bytes so far are a valid prefix that the input ends inside.
std::size_t sequence_length(std::string_view bytes, std::size_t i, bool* partial = nullptr) {
    auto at = [&](std::size_t k) { return static_cast<std::uint8_t>(bytes[k]); };
    std::uint8_t b0 = at(i);
    if (b0 < 0x80) return 1;
    std::size_t len;
    std::uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        if (b0 == 0xE0) lo = 0xA0;  // overlong
        if (b0 == 0xED) hi = 0x9F;  // surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        if (b0 == 0xF0) lo = 0x90;  // overlong
        if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
        return 0;
    }
    for (std::size_t k = 1; k < len; ++k) {
        if (i + k >= bytes.size()) {
            if (partial) *partial = true;
            return 0;
        }
        std::uint8_t b = at(i + k);
        std::uint8_t min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
        if (b < min || b > max) return 0;
    }
    return len;
}

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

bool is_valid_utf8(std::string_view bytes) {
    for (std::size_t i = 0; i < bytes.size();) {
        std::size_t n = sequence_length(bytes, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string to_valid_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    for (std::size_t i = 0; i < bytes.size();) {
        std::size_t n = sequence_length(bytes, i);
        if (n == 0) {
            out += "\xEF\xBF\xBD";
            // Skip the lead byte and the continuation bytes that followed it.
            ++i;
            while (i < bytes.size() && (static_cast<std::uint8_t>(bytes[i]) & 0xC0) == 0x80 &&
                   sequence_length(bytes, i) == 0)
                ++i;
            continue;
        }
        out.append(bytes.substr(i, n));
        i += n;
    }
    return out;
}

std::size_t trim_partial_utf8(std::string_view bytes) {
    // A sequence is at most 4 bytes, so only the last 3 can start an unfinished one.
    std::size_t from = bytes.size() > 3 ? bytes.size() - 3 : 0;
    for (std::size_t i = from; i < bytes.size(); ++i) {
        bool partial = false;
        if (sequence_length(bytes, i, &partial) == 0 && partial) return i;
    }
    return bytes.size();
}

std::string base64_encode(std::string_view bytes) {
    static constexpr char table[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    std::size_t i = 0;
    auto byte = [&](std::size_t k) {
        return static_cast<std::uint32_t>(static_cast<std::uint8_t>(bytes[k]));
    };
    for (; i + 2 < bytes.size(); i += 3) {
        std::uint32_t v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
        out += table[v >> 18];
        out += table[(v >> 12) & 63];
        out += table[(v >> 6) & 63];
        out += table[v & 63];
    }
    if (i + 1 == bytes.size()) {
        std::uint32_t v = byte(i) << 16;
        out += table[v >> 18];
        out += table[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == bytes.size()) {
        std::uint32_t v = byte(i) << 16 | byte(i + 1) << 8;
        out += table[v >> 18];
        out += table[(v >> 12) & 63];
        out += table[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

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
        std::size_t n = sequence_length(utf8, i);
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
