// Unpredictable bytes from the kernel (getrandom(2)), for tokens, passwords, ids and DNS
// transaction ids. One source for the whole tree: nothing that an attacker could guess comes
// from std::mt19937 or std::random_device's implementation-defined engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deskbox::random {

// Blocks only before the kernel's pool is first initialised (early boot).
void fill(void* data, std::size_t size);
std::vector<std::uint8_t> bytes(std::size_t count);
// `count` random bytes as 2*count lowercase hex digits.
std::string hex(std::size_t count);
// `length` characters drawn uniformly from `alphabet` (no modulo bias). `alphabet` must hold
// 1 to 256 characters.
std::string from_alphabet(std::string_view alphabet, std::size_t length);

template <typename Integer>
Integer value() {
    Integer out;
    fill(&out, sizeof out);
    return out;
}

}  // namespace deskbox::random
