#include "server/runtime/container/mounts.hpp"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "server/runtime/runtime.hpp"
#include "server/runtime/runtime_util.hpp"

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

// A loop device already backed by `image` (its filesystem may still be alive in a sandbox's
// mount namespace after the host unmounted it): mounting the same device again shares that
// filesystem, where a second device over the same file would corrupt it.
std::optional<std::string> loop_backed_by(const std::filesystem::path& image) {
    struct stat target {};
    if (::stat(image.c_str(), &target) != 0) return std::nullopt;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/sys/block", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("loop", 0) != 0) continue;
        const std::string node = "/dev/" + name;
        UniqueFd loop(::open(node.c_str(), O_RDONLY | O_CLOEXEC));
        loop_info64 info{};
        if (!loop || ::ioctl(loop.get(), LOOP_GET_STATUS64, &info) != 0) continue;
        if (info.lo_device == target.st_dev && info.lo_inode == target.st_ino) return node;
    }
    return std::nullopt;
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

namespace {

// Binds `image` to a free loop device that detaches itself when its last user (the mount)
// goes. Another process may take the device we were offered first: then ask again.
UniqueFd attach_loop(int image_fd, const std::filesystem::path& image) {
    UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
    if (!control)
        throw RuntimeError(std::string("open /dev/loop-control: ") + std::strerror(errno));
    for (int attempt = 0; attempt < 32; ++attempt) {
        int number = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
        if (number < 0)
            throw RuntimeError(std::string("no free loop device: ") + std::strerror(errno));
        std::string node = "/dev/loop" + std::to_string(number);
        UniqueFd loop(::open(node.c_str(), O_RDWR | O_CLOEXEC));
        if (!loop && errno == ENOENT) {
            // No udev (a host that is itself a container): make the node.
            ::mknod(node.c_str(), S_IFBLK | 0660, makedev(7, static_cast<unsigned>(number)));
            loop.reset(::open(node.c_str(), O_RDWR | O_CLOEXEC));
        }
        if (!loop) throw RuntimeError("open " + node + ": " + std::strerror(errno));
        loop_config config{};
        config.fd = static_cast<std::uint32_t>(image_fd);
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), image.c_str(),
                     LO_NAME_SIZE - 1);
        if (::ioctl(loop.get(), LOOP_CONFIGURE, &config) == 0) return loop;
        if (errno != EBUSY)
            throw RuntimeError("attach " + image.string() + " to " + node + ": " +
                               std::strerror(errno));
    }
    throw RuntimeError("attach " + image.string() + ": every free loop device was taken first");
}

}  // namespace

void make_ext4_image(const std::filesystem::path& image, std::uint64_t size_mb,
                     const Ext4ImageOptions& options) {
    {
        UniqueFd file(::open(image.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
        if (!file) throw RuntimeError("create " + image.string() + ": " + std::strerror(errno));
        if (::ftruncate(file.get(), static_cast<off_t>(size_mb << 20)) != 0)
            throw RuntimeError("size " + image.string() + ": " + std::strerror(errno));
    }
    std::string extended =
        "lazy_itable_init=1,nodiscard,root_owner=" + std::to_string(options.root_uid) + ":" +
        std::to_string(options.root_gid);
    if (options.journal) extended += ",lazy_journal_init=1";
    RunResult made;
    try {
        made = run_process(
            {options.mkfs, "-q", "-F", "-m", "0", "-O",
             options.journal ? "has_journal" : "^has_journal", "-E", extended, image.string()},
            std::chrono::seconds(60));
    } catch (const std::system_error& e) {
        throw RuntimeError("cannot run " + options.mkfs + ": " + e.what());
    }
    check_tool(made, options.mkfs + " " + image.string());
}

void grow_ext4_image(const std::filesystem::path& image, std::uint64_t size_mb) {
    std::filesystem::resize_file(image, size_mb << 20);
    const auto checked =
        run_process({"e2fsck", "-f", "-p", image.string()}, std::chrono::minutes(10));
    if (checked.status.exit_code > 1)  // 1: errors corrected
        throw RuntimeError("e2fsck " + image.string() + ": " + checked.err);
    check_tool(run_process({"resize2fs", image.string()}, std::chrono::minutes(10)),
               "resize2fs " + image.string());
}

// Our images start as sparse files of zeros (make_ext4_image), so their inode tables need no
// zeroing: without this the kernel's lazy init would write them out in the background (half a
// GiB for a 32 GiB engine disk) and fill the sparse file for nothing.
constexpr const char* kExt4MountData = "noinit_itable";

void mount_ext4_image(const std::filesystem::path& image,
                      const std::filesystem::path& mount_point) {
    if (auto existing = loop_backed_by(image)) {
        if (::mount(existing->c_str(), mount_point.c_str(), "ext4", MS_NOSUID | MS_NODEV,
                    kExt4MountData) != 0)
            throw RuntimeError("mount " + *existing + " (" + image.string() + ") at " +
                               mount_point.string() + ": " + std::strerror(errno));
        return;
    }
    UniqueFd file(::open(image.c_str(), O_RDWR | O_CLOEXEC));
    if (!file) throw RuntimeError("open " + image.string() + ": " + std::strerror(errno));
    UniqueFd loop = attach_loop(file.get(), image);
    std::string device = "/proc/self/fd/" + std::to_string(loop.get());
    char node[64] = {};
    if (::readlink(device.c_str(), node, sizeof node - 1) < 0)
        throw RuntimeError("readlink " + device + ": " + std::strerror(errno));
    if (::mount(node, mount_point.c_str(), "ext4", MS_NOSUID | MS_NODEV, kExt4MountData) != 0)
        throw RuntimeError("mount " + std::string(node) + " (" + image.string() + ") at " +
                           mount_point.string() + ": " + std::strerror(errno));
    // The mount holds the loop device now; closing ours lets autoclear detach it on unmount.
}

void mount_capped_disk(const std::filesystem::path& image, const std::filesystem::path& mount_point,
                       std::uint64_t size_mb, const std::string& mkfs) {
    Ext4ImageOptions options;
    options.mkfs = mkfs;
    make_ext4_image(image, size_mb, options);
    mount_ext4_image(image, mount_point);
}

std::optional<DiskUsage> disk_usage(const std::filesystem::path& path) {
    struct statvfs st {};
    if (::statvfs(path.c_str(), &st) != 0) return std::nullopt;
    DiskUsage u;
    u.size_bytes = static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize;
    u.used_bytes = static_cast<std::uint64_t>(st.f_blocks - st.f_bfree) * st.f_frsize;
    return u;
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
