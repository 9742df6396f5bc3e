// Content addresses (agent images, template snapshots, cgroup names per state root): a hash
// that is stable across runs and builds, and a cheap version stamp of a file.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace deskbox::runtime {

// FNV-1a, 64 bit: stable across runs and builds (content addresses), unlike std::hash.
struct Fnv64 {
    std::uint64_t value = 14695981039346656037ull;
    void add(const void* data, std::size_t size) {
        const auto* bytes = static_cast<const unsigned char*>(data);
        for (std::size_t i = 0; i < size; ++i) value = (value ^ bytes[i]) * 1099511628211ull;
    }
    void add(const std::string& s) {
        add(s.data(), s.size());
        add("\0", 1);
    }
    std::string hex() const {
        char out[17];
        std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(value));
        return out;
    }
};

// Identifies a file's version cheaply (a rebuilt image or an upgraded QEMU changes it).
inline std::string file_version(const std::filesystem::path& file) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) return file.string() + " missing";
    return file.string() + ' ' + std::to_string(st.st_size) + ' ' +
           std::to_string(st.st_mtim.tv_sec) + '.' + std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace deskbox::runtime
