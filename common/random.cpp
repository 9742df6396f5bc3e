#include "common/random.hpp"

#include <sys/random.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace deskbox::random {

void fill(void* data, std::size_t size) {
    auto* out = static_cast<std::uint8_t*>(data);
    std::size_t got = 0;
    while (got < size) {
        ssize_t n = ::getrandom(out + got, size - got, 0);
        if (n > 0) {
            got += static_cast<std::size_t>(n);
        } else if (n < 0 && errno != EINTR) {
            throw std::system_error(errno, std::generic_category(), "getrandom");
        }
    }
}

std::vector<std::uint8_t> bytes(std::size_t count) {
    std::vector<std::uint8_t> out(count);
    fill(out.data(), out.size());
    return out;
}

std::string hex(std::size_t count) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    out.reserve(count * 2);
    for (std::uint8_t byte : bytes(count)) {
        out += kDigits[byte >> 4];
        out += kDigits[byte & 15];
    }
    return out;
}

std::string from_alphabet(std::string_view alphabet, std::size_t length) {
    if (alphabet.empty() || alphabet.size() > 256)
        throw std::invalid_argument("random::from_alphabet: 1 to 256 characters");
    // Bytes at or above the largest multiple of the alphabet's size are drawn again, so every
    // character is equally likely.
    const unsigned limit = 256 - 256 % static_cast<unsigned>(alphabet.size());
    std::string out;
    out.reserve(length);
    while (out.size() < length) {
        for (std::uint8_t byte : bytes(length - out.size()))
            if (byte < limit && out.size() < length) out += alphabet[byte % alphabet.size()];
    }
    return out;
}

}  // namespace deskbox::random
