#include "server/runtime/mounts.hpp"

#include <sys/mount.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& field) {
    std::string out;
    out.reserve(field.size());
    auto is_octal = [](char c) { return c >= '0' && c <= '7'; };
    for (std::size_t i = 0; i < field.size(); ++i) {
        if (field[i] == '\\' && i + 3 < field.size() && is_octal(field[i + 1]) &&
            is_octal(field[i + 2]) && is_octal(field[i + 3])) {
            out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                            (field[i + 3] - '0')));
            i += 3;
        } else {
            out.push_back(field[i]);
        }
    }
    return out;
}

bool is_at_or_below(const std::filesystem::path& path, const std::filesystem::path& dir) {
    auto p = path.begin();
    for (auto d = dir.begin(); d != dir.end(); ++d, ++p) {
        if (d->empty()) continue;  // trailing separator
        if (p == path.end() || *p != *d) return false;
    }
    return true;
}

}  // namespace

std::vector<MountEntry> read_mountinfo(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) throw RuntimeError("cannot read " + file.string());
    std::vector<MountEntry> entries;
    std::string line;
    while (std::getline(in, line)) {
        // id parent major:minor root mount-point options [optional...] - fstype source super
        std::istringstream fields(line);
        std::string id, parent, dev, root, mount_point, options, word;
        if (!(fields >> id >> parent >> dev >> root >> mount_point >> options)) continue;
        while (fields >> word && word != "-") {
        }
        MountEntry entry;
        entry.root = unescape(root);
        entry.mount_point = unescape(mount_point);
        fields >> entry.fstype >> entry.source >> entry.super_options;
        entry.source = unescape(entry.source);
        entries.push_back(std::move(entry));
    }
    return entries;
}

std::vector<std::filesystem::path> mounts_under(const std::filesystem::path& dir) {
    std::error_code ec;
    auto canonical_dir = std::filesystem::weakly_canonical(dir, ec);
    if (ec) canonical_dir = dir;
    std::vector<std::filesystem::path> found;
    for (auto& entry : read_mountinfo())
        if (is_at_or_below(entry.mount_point, canonical_dir))
            found.push_back(std::move(entry.mount_point));
    // Later lines in mountinfo are mounted on top of earlier ones: unmount in reverse order,
    // deeper paths first.
    std::reverse(found.begin(), found.end());
    std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
        return std::distance(a.begin(), a.end()) > std::distance(b.begin(), b.end());
    });
    found.erase(std::unique(found.begin(), found.end()), found.end());
    return found;
}

std::string overlay_path_problem(const std::filesystem::path& path) {
    const std::string s = path.string();
    for (char c : {',', ':', '\\'})
        if (s.find(c) != std::string::npos)
            return std::string("contains '") + c + "', which overlayfs options cannot express";
    return {};
}

void mount_overlay(const std::filesystem::path& lower, const std::filesystem::path& upper,
                   const std::filesystem::path& work, const std::filesystem::path& target) {
    for (const auto* p : {&lower, &upper, &work})
        if (auto problem = overlay_path_problem(*p); !problem.empty())
            throw RuntimeError("overlay path " + p->string() + " " + problem);
    std::string options =
        "lowerdir=" + lower.string() + ",upperdir=" + upper.string() + ",workdir=" + work.string();
    if (::mount("overlay", target.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) != 0)
        throw RuntimeError("mount overlay at " + target.string() + " (" + options +
                           "): " + std::strerror(errno));
}

void unmount_all(const std::filesystem::path& target) {
    // Several mounts may be stacked on one point; stop when the kernel says it is no mount.
    for (int attempt = 0; attempt < 64; ++attempt) {
        if (::umount2(target.c_str(), UMOUNT_NOFOLLOW) == 0) continue;
        int err = errno;
        if (err == EINVAL || err == ENOENT) return;  // not (or no longer) a mount point
        if (err == EBUSY) {
            if (attempt < 10) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                continue;
            }
            if (::umount2(target.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) continue;
            err = errno;
        }
        throw RuntimeError("unmount " + target.string() + ": " + std::strerror(err));
    }
    throw RuntimeError("unmount " + target.string() + ": still mounted after 64 unmounts");
}

}  // namespace deskbox::runtime
