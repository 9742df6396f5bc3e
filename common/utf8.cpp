#include "common/utf8.hpp"

#include <cstdint>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace deskbox::utf8 {

std::size_t sequence_length(std::string_view bytes, std::size_t i, bool* partial) {
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

std::optional<std::size_t> first_invalid(std::string_view bytes) {
    for (std::size_t i = 0; i < bytes.size();) {
        std::size_t n = sequence_length(bytes, i);
        if (n == 0) return i;
        i += n;
    }
    return std::nullopt;
}

std::optional<std::u32string> code_points(std::string_view bytes, std::size_t* error_offset) {
    std::u32string out;
    out.reserve(bytes.size());
    for (std::size_t i = 0; i < bytes.size();) {
        const std::size_t n = sequence_length(bytes, i);
        if (n == 0) {
            if (error_offset) *error_offset = i;
            return std::nullopt;
        }
        // The lead byte keeps 7, 5, 4 or 3 payload bits; each continuation byte adds 6.
        constexpr std::uint8_t kLeadPayload[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
        char32_t cp = static_cast<std::uint8_t>(bytes[i]) & kLeadPayload[n];
        for (std::size_t k = 1; k < n; ++k)
            cp = (cp << 6) | (static_cast<std::uint8_t>(bytes[i + k]) & 0x3F);
        out.push_back(cp);
        i += n;
    }
    return out;
}

bool is_valid(std::string_view bytes) {
    return !first_invalid(bytes);
}

std::string from_latin1(std::string_view latin1) {
    std::string out;
    out.reserve(latin1.size());
    for (char c : latin1) {
        auto b = static_cast<std::uint8_t>(c);
        if (b < 0x80) {
            out += c;
        } else {
            out += static_cast<char>(0xC0 | (b >> 6));
            out += static_cast<char>(0x80 | (b & 0x3F));
        }
    }
    return out;
}

std::string to_valid(std::string_view bytes) {
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

std::string escape_invalid(std::string_view bytes) {
    if (is_valid(bytes)) return std::string(bytes);
    std::string out;
    out.reserve(bytes.size() + 16);
    for (std::size_t i = 0; i < bytes.size();) {
        std::size_t n = sequence_length(bytes, i);
        if (n == 0) {
            char hex[5];
            std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<std::uint8_t>(bytes[i]));
            out += hex;
            ++i;
            continue;
        }
        out.append(bytes.substr(i, n));
        i += n;
    }
    return out;
}

nlohmann::json escape_invalid_in(const nlohmann::json& value) {
    if (value.is_string())
        return escape_invalid(std::string_view(value.get_ref<const std::string&>()));
    if (value.is_array()) {
        auto out = nlohmann::json::array();
        for (const auto& item : value) out.push_back(escape_invalid_in(item));
        return out;
    }
    if (value.is_object()) {
        auto out = nlohmann::json::object();
        for (const auto& [key, item] : value.items())
            out[escape_invalid(key)] = escape_invalid_in(item);
        return out;
    }
    return value;
}

std::size_t trim_partial(std::string_view bytes) {
    // A sequence is at most 4 bytes, so only the last 3 can start an unfinished one.
    std::size_t from = bytes.size() > 3 ? bytes.size() - 3 : 0;
    for (std::size_t i = from; i < bytes.size(); ++i) {
        bool partial = false;
        if (sequence_length(bytes, i, &partial) == 0 && partial) return i;
    }
    return bytes.size();
}

}  // namespace deskbox::utf8
