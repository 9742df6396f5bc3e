#include "server/runtime/tree_copy.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;

std::uint32_t IdShift::map(std::uint32_t id) const {
    constexpr std::uint32_t kRange = 65536, kNobody = 65534;
    if (id >= from_base && id - from_base < kRange) return to_base + (id - from_base);
    return to_base + kNobody;
}

namespace {

// Deeper than this is refused (each level holds two open directories).
constexpr int kMaxDepth = 200;

// overlayfs' own bookkeeping that names the old upper's inodes: meaningless in a new one.
bool overlay_private(const std::string& name) {
    for (const char* prefix :
         {"trusted.overlay.origin", "trusted.overlay.impure", "trusted.overlay.nlink",
          "trusted.overlay.upper", "trusted.overlay.uuid"})
        if (name == prefix) return true;
    return false;
}

class TreeCopier {
  public:
    TreeCopier(const fs::path& from, const fs::path& to, const IdShift& shift)
        : from_(from), to_(to), shift_(shift) {}

    TreeCopyStats run() {
        UniqueFd src(::open(from_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
        if (!src) fail(from_, "open");
        UniqueFd dst(::open(to_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
        if (!dst) fail(to_, "open");
        dst_root_ = dst.get();
        struct stat st {};
        if (::fstat(src.get(), &st) != 0) fail(from_, "stat");
        copy_children(src.get(), dst.get(), "", 0);
        finish(dst.get(), nullptr, src.get(), nullptr, st, "");
        return stats_;
    }

  private:
    [[noreturn]] static void fail(const fs::path& path, const char* what) {
        int err = errno;
        std::string message =
            std::string("copying ") + path.string() + ": " + what + ": " + std::strerror(err);
        if (err == ENOSPC || err == EDQUOT) throw NoSpaceError(message);
        throw RuntimeError(message);
    }

    // Where extended attributes are read or written: an open file itself (f*xattr: the l*
    // calls on /proc/self/fd/N would see the magic link, not the file), or an entry of an open
    // directory that is never opened (symlinks, devices) through its /proc path.
    struct XattrTarget {
        int fd;
        std::string entry;  // empty: `fd` itself
        XattrTarget(int dir_fd, const char* name)
            : fd(dir_fd),
              entry(name ? "/proc/self/fd/" + std::to_string(dir_fd) + "/" + name : "") {}
        ssize_t list(char* names, std::size_t size) const {
            return entry.empty() ? ::flistxattr(fd, names, size)
                                 : ::llistxattr(entry.c_str(), names, size);
        }
        ssize_t get(const std::string& name, void* value, std::size_t size) const {
            return entry.empty() ? ::fgetxattr(fd, name.c_str(), value, size)
                                 : ::lgetxattr(entry.c_str(), name.c_str(), value, size);
        }
        int set(const std::string& name, const std::string& value) const {
            return entry.empty()
                       ? ::fsetxattr(fd, name.c_str(), value.data(), value.size(), 0)
                       : ::lsetxattr(entry.c_str(), name.c_str(), value.data(), value.size(), 0);
        }
    };

    void copy_children(int src_dir, int dst_dir, const std::string& rel, int depth) {
        if (depth >= kMaxDepth)
            throw RuntimeError("copying " + (from_ / rel).string() + ": nested deeper than " +
                               std::to_string(kMaxDepth) + " directories");
        int listing_fd = ::openat(src_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (listing_fd < 0) fail(from_ / rel, "open");
        DIR* listing = ::fdopendir(listing_fd);
        if (!listing) {
            ::close(listing_fd);
            fail(from_ / rel, "fdopendir");
        }
        std::vector<std::string> names;
        while (dirent* entry = ::readdir(listing)) {
            std::string name = entry->d_name;
            if (name != "." && name != "..") names.push_back(std::move(name));
        }
        ::closedir(listing);
        for (const auto& name : names) {
            const std::string child = rel.empty() ? name : rel + "/" + name;
            copy_entry(src_dir, dst_dir, name, child, depth);
        }
    }

    void copy_entry(int src_dir, int dst_dir, const std::string& name, const std::string& rel,
                    int depth) {
        struct stat st {};
        if (::fstatat(src_dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
            fail(from_ / rel, "stat");
        const char* n = name.c_str();
        switch (st.st_mode & S_IFMT) {
            case S_IFDIR: {
                if (::mkdirat(dst_dir, n, 0700) != 0) fail(to_ / rel, "mkdir");
                UniqueFd src(::openat(src_dir, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
                if (!src) fail(from_ / rel, "open");
                UniqueFd dst(::openat(dst_dir, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
                if (!dst) fail(to_ / rel, "open");
                copy_children(src.get(), dst.get(), rel, depth + 1);
                finish(dst.get(), nullptr, src.get(), nullptr, st, rel);
                break;
            }
            case S_IFREG:
                copy_file(src_dir, dst_dir, n, rel, st);
                break;
            case S_IFLNK: {
                std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
                ssize_t got = ::readlinkat(src_dir, n, target.data(), target.size());
                if (got < 0) fail(from_ / rel, "readlink");
                target.resize(static_cast<std::size_t>(got));
                if (::symlinkat(target.c_str(), dst_dir, n) != 0) fail(to_ / rel, "symlink");
                finish(dst_dir, n, src_dir, n, st, rel);
                break;
            }
            case S_IFCHR:
            case S_IFBLK:
            case S_IFIFO:
                // Whiteouts (0/0 character devices) above all; a guest cannot make others.
                if (::mknodat(dst_dir, n, st.st_mode & (S_IFMT | 0777), st.st_rdev) != 0)
                    fail(to_ / rel, "mknod");
                finish(dst_dir, n, src_dir, n, st, rel);
                break;
            default:
                return;  // sockets: nothing can use a saved one
        }
        ++stats_.files;
    }

    void copy_file(int src_dir, int dst_dir, const char* name, const std::string& rel,
                   const struct stat& st) {
        if (st.st_nlink > 1) {
            auto key = std::make_pair(st.st_dev, st.st_ino);
            if (auto it = links_.find(key); it != links_.end()) {
                if (::linkat(dst_root_, it->second.c_str(), dst_dir, name, 0) != 0)
                    fail(to_ / rel, "link");
                return;
            }
            links_[key] = rel;
        }
        UniqueFd src(::openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
        if (!src) fail(from_ / rel, "open");
        UniqueFd dst(
            ::openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!dst) fail(to_ / rel, "create");
        copy_contents(src.get(), dst.get(), st, rel);
        finish(dst.get(), nullptr, src.get(), nullptr, st, rel);
    }

    // Data segments only: a sparse file stays sparse.
    void copy_contents(int src, int dst, const struct stat& st, const std::string& rel) {
        const off_t size = st.st_size;
        off_t data = 0;
        while (data < size) {
            data = ::lseek(src, data, SEEK_DATA);
            if (data < 0) {
                if (errno == ENXIO) break;  // only a hole is left
                fail(from_ / rel, "seek");
            }
            off_t hole = ::lseek(src, data, SEEK_HOLE);
            if (hole < 0) fail(from_ / rel, "seek");
            off_t in = data, out = data;
            while (in < hole) {
                ssize_t n =
                    ::copy_file_range(src, &in, dst, &out, static_cast<std::size_t>(hole - in), 0);
                if (n < 0 &&
                    (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
                    copy_by_reading(src, dst, in, hole, rel);
                    out = in = hole;
                    break;
                }
                if (n < 0) fail(to_ / rel, "write");
                if (n == 0) break;  // the file shrank meanwhile
            }
            stats_.bytes += static_cast<std::uint64_t>(in - data);
            data = hole;
        }
        if (::ftruncate(dst, size) != 0) fail(to_ / rel, "truncate");
    }

    // Across filesystems (a sandbox's disk to the state dir): sendfile copies in the kernel;
    // where it cannot, a buffer made once (a zeroed MiB per file was most of a copy's time).
    void copy_by_reading(int src, int dst, off_t from, off_t to, const std::string& rel) {
        if (::lseek(dst, from, SEEK_SET) != from) fail(to_ / rel, "seek");
        while (from < to) {
            ssize_t sent = ::sendfile(dst, src, &from, static_cast<std::size_t>(to - from));
            if (sent < 0 && (errno == EINVAL || errno == ENOSYS)) break;
            if (sent < 0) fail(to_ / rel, "write");
            if (sent == 0) return;  // the file shrank meanwhile
        }
        if (buffer_.empty()) buffer_.resize(1 << 20);
        std::vector<char>& buffer = buffer_;
        while (from < to) {
            auto want = static_cast<std::size_t>(
                std::min<off_t>(to - from, static_cast<off_t>(buffer.size())));
            ssize_t got = ::pread(src, buffer.data(), want, from);
            if (got < 0) fail(from_ / rel, "read");
            if (got == 0) return;
            for (ssize_t done = 0; done < got;) {
                ssize_t put = ::pwrite(dst, buffer.data() + done,
                                       static_cast<std::size_t>(got - done), from + done);
                if (put < 0) fail(to_ / rel, "write");
                done += put;
            }
            from += got;
        }
    }

    // Owner, mode, attributes and times of what was made: `dst_fd` itself (name null) or the
    // entry `name` in directory `dst_fd` (symlinks, devices: never opened).
    void finish(int dst_fd, const char* dst_name, int src_fd, const char* src_name,
                const struct stat& st, const std::string& rel) {
        const bool is_link = S_ISLNK(st.st_mode);
        const int at_flags = dst_name ? AT_SYMLINK_NOFOLLOW : AT_EMPTY_PATH;
        const char* at_name = dst_name ? dst_name : "";
        if (::fchownat(dst_fd, at_name, shift_.map(st.st_uid), shift_.map(st.st_gid), at_flags) !=
            0)
            fail(to_ / rel, "chown");
        copy_xattrs(XattrTarget(src_fd, src_name), XattrTarget(dst_fd, dst_name), rel);
        // After chown, which clears set-id bits.
        if (!is_link) {
            int mode_rc = dst_name ? ::fchmodat(dst_fd, dst_name, st.st_mode & 07777, 0)
                                   : ::fchmod(dst_fd, st.st_mode & 07777);
            if (mode_rc != 0) fail(to_ / rel, "chmod");
        }
        const struct timespec times[2] = {st.st_atim, st.st_mtim};
        int rc = dst_name ? ::utimensat(dst_fd, dst_name, times, AT_SYMLINK_NOFOLLOW)
                          : ::futimens(dst_fd, times);
        if (rc != 0) fail(to_ / rel, "utimes");
    }

    void copy_xattrs(const XattrTarget& src, const XattrTarget& dst, const std::string& rel) {
        ssize_t size = src.list(nullptr, 0);
        if (size <= 0) return;  // none, or a filesystem without them
        std::string names(static_cast<std::size_t>(size), '\0');
        size = src.list(names.data(), names.size());
        if (size < 0) fail(from_ / rel, "listxattr");
        names.resize(static_cast<std::size_t>(size));
        for (std::size_t at = 0; at < names.size();) {
            std::string name = names.c_str() + at;
            at += name.size() + 1;
            if (name.empty() || overlay_private(name)) continue;
            ssize_t len = src.get(name, nullptr, 0);
            if (len < 0) continue;  // gone meanwhile
            std::string value(static_cast<std::size_t>(len), '\0');
            len = src.get(name, value.data(), value.size());
            if (len < 0) continue;
            value.resize(static_cast<std::size_t>(len));
            if (name == "security.capability") shift_capability_root(value);
            if (dst.set(name, value) != 0) fail(to_ / rel, ("setxattr " + name).c_str());
        }
    }

    // A v3 file capability names the host id of its user namespace's root (bytes 20..23).
    void shift_capability_root(std::string& value) const {
        constexpr std::uint32_t kRevision3 = 0x03000000;
        if (value.size() != 24) return;
        auto le32 = [&](std::size_t at) {
            std::uint32_t v = 0;
            for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(value[at + i]);
            return v;
        };
        if ((le32(0) & 0xFF000000u) != kRevision3) return;
        std::uint32_t root = shift_.map(le32(20));
        for (int i = 0; i < 4; ++i) value[20 + i] = static_cast<char>((root >> (8 * i)) & 0xFF);
    }

    fs::path from_, to_;
    IdShift shift_;
    int dst_root_ = -1;
    TreeCopyStats stats_;
    std::vector<char> buffer_;
    std::map<std::pair<dev_t, ino_t>, std::string> links_;  // first copy of a hard-linked file
};

}  // namespace

TreeCopyStats copy_tree(const fs::path& from, const fs::path& to, const IdShift& shift) {
    return TreeCopier(from, to, shift).run();
}

}  // namespace deskbox::runtime
