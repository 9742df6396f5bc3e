#include "guest-desktop/services/file_service.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "common/unique_fd.hpp"
#include "common/utf8.hpp"
#include "guest-desktop/services/params.hpp"

namespace deskbox::services {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void throw_errno(int err, const std::string& action, const std::string& path) {
    const char* code = error_code::io_error;
    switch (err) {
        case ENOENT:
            code = error_code::not_found;
            break;
        case EACCES:
        case EPERM:
        case EROFS:
            code = error_code::permission_denied;
            break;
        case EISDIR:
            code = error_code::is_a_directory;
            break;
        case ENOTDIR:
            code = error_code::not_a_directory;
            break;
        case EEXIST:
            code = error_code::already_exists;
            break;
        case ENOTEMPTY:
            code = error_code::not_empty;
            break;
        case EFBIG:
            code = error_code::too_large;
            break;
    }
    throw ServiceError(code, action + " " + path + ": " + std::strerror(err), "path");
}

std::string path_param(const json& p) {
    std::string path = params::req_string(p, "path");
    if (path.empty()) throw bad_request("path", "must not be empty");
    params::require_no_nul(path, "path");
    if (path[0] != '/') throw bad_request("path", "must be absolute (start with '/'): " + path);
    return path;
}

// mode as an integer (0420) or an octal string ("0644"), permission bits only.
std::optional<mode_t> mode_param(const json& p) {
    auto it = p.find("mode");
    if (it == p.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) {
        const std::string s = it->get<std::string>();
        bool octal = !s.empty() && s.size() <= 5 &&
                     std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '7'; });
        unsigned long v = octal ? std::stoul(s, nullptr, 8) : 0;
        if (!octal || v > 07777)
            throw bad_request("mode", "must be an octal string of permission bits like \"0644\"");
        return static_cast<mode_t>(v);
    }
    return static_cast<mode_t>(*params::opt_int(p, "mode", 0, 07777));
}

const char* type_of(mode_t mode) {
    if (S_ISREG(mode)) return "file";
    if (S_ISDIR(mode)) return "dir";
    if (S_ISLNK(mode)) return "symlink";
    return "other";
}

json describe(const struct stat& st) {
    return {{"type", type_of(st.st_mode)},
            {"size", static_cast<std::int64_t>(st.st_size)},
            {"mode", st.st_mode & 07777},
            {"mtime", static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9}};
}

std::string read_link(const std::string& path) {
    std::error_code ec;
    fs::path target = fs::read_symlink(path, ec);
    return ec ? std::string() : utf8::to_valid(target.string());
}

struct DirCloser {
    void operator()(DIR* d) const { ::closedir(d); }
};

// A temp file next to the destination, unlinked unless committed.
class PendingFile {
  public:
    explicit PendingFile(const std::string& destination) {
        fs::path dest(destination);
        std::string templ =
            (dest.parent_path() / ("." + dest.filename().string() + ".deskbox-XXXXXX")).string();
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        int fd = ::mkostemp(buf.data(), O_CLOEXEC);
        if (fd < 0) throw_errno(errno, "cannot create a temporary file for", destination);
        fd_.reset(fd);
        path_ = buf.data();
    }
    ~PendingFile() {
        if (!path_.empty()) ::unlink(path_.c_str());
    }
    PendingFile(const PendingFile&) = delete;
    PendingFile& operator=(const PendingFile&) = delete;
    int fd() const { return fd_.get(); }
    const std::string& path() const { return path_; }
    void committed() { path_.clear(); }

  private:
    UniqueFd fd_;
    std::string path_;
};

void create_parents(const std::string& path) {
    fs::path parent = fs::path(path).parent_path();
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) throw_errno(ec.value(), "cannot create directory", parent.string());
}

}  // namespace

Reply FileService::read(const json& params) const {
    const json& p = params::object(params, {"path"});
    std::string path = path_param(p);
    // O_NONBLOCK so opening a FIFO cannot hang the request; it is refused below anyway.
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    if (!fd) throw_errno(errno, "cannot open", path);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno(errno, "cannot stat", path);
    if (S_ISDIR(st.st_mode)) throw_errno(EISDIR, "cannot read", path);
    if (!S_ISREG(st.st_mode))
        throw ServiceError(
            error_code::bad_request,
            "cannot read " + path + ": not a regular file (" + type_of(st.st_mode) + ")", "path");
    auto too_large = [&] {
        return ServiceError(error_code::too_large,
                            "cannot read " + path + ": larger than the limit of " +
                                std::to_string(limits_.max_read_bytes) + " bytes",
                            "path");
    };
    if (static_cast<std::uint64_t>(st.st_size) > limits_.max_read_bytes) throw too_large();
    Reply reply;
    // st_size is only a hint (procfs reports 0, files grow): read to EOF, bounded.
    reply.body.resize(
        std::min<std::size_t>(static_cast<std::size_t>(st.st_size), limits_.max_read_bytes) + 1);
    std::size_t used = 0;
    while (true) {
        if (used == reply.body.size()) {
            if (used > limits_.max_read_bytes) throw too_large();
            reply.body.resize(std::min(limits_.max_read_bytes + 1, used * 2 + 65536));
        }
        ssize_t n = ::read(fd.get(), reply.body.data() + used, reply.body.size() - used);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno(errno, "cannot read", path);
        if (n == 0) break;
        used += static_cast<std::size_t>(n);
    }
    if (used > limits_.max_read_bytes) throw too_large();
    reply.body.resize(used);
    reply.result = {{"size", used}, {"mode", st.st_mode & 07777}};
    return reply;
}

json FileService::write(const json& params, std::string_view body) const {
    const json& p = params::object(params, {"path", "mode", "append", "parents"});
    std::string path = path_param(p);
    auto mode = mode_param(p);
    bool append = params::opt_bool(p, "append").value_or(false);
    bool parents = params::opt_bool(p, "parents").value_or(false);
    if (body.size() > limits_.max_write_bytes)
        throw ServiceError(error_code::too_large,
                           "cannot write " + path + ": " + std::to_string(body.size()) +
                               " bytes is more than the limit of " +
                               std::to_string(limits_.max_write_bytes),
                           "path");
    if (parents) create_parents(path);

    struct stat st {};
    bool exists = ::lstat(path.c_str(), &st) == 0;
    if (exists && S_ISLNK(st.st_mode)) {
        // Write through the link so it keeps pointing where it did.
        std::error_code ec;
        fs::path target = fs::weakly_canonical(path, ec);
        if (ec) throw_errno(ec.value(), "cannot resolve", path);
        path = target.string();
        exists = ::lstat(path.c_str(), &st) == 0;
    }
    if (exists && S_ISDIR(st.st_mode)) throw_errno(EISDIR, "cannot write", path);

    if (append) {
        UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY,
                           mode.value_or(0644)));
        if (!fd) throw_errno(errno, "cannot open", path);
        if (!write_all(fd.get(), body.data(), body.size()))
            throw_errno(errno, "cannot write", path);
        if ((mode || !exists) && ::fchmod(fd.get(), mode.value_or(0644)) != 0)
            throw_errno(errno, "cannot chmod", path);
        if (::fstat(fd.get(), &st) != 0) throw_errno(errno, "cannot stat", path);
        return {{"size", static_cast<std::int64_t>(st.st_size)}};
    }

    if (exists && !S_ISREG(st.st_mode))
        throw ServiceError(
            error_code::bad_request,
            "cannot replace " + path + ": not a regular file (" + type_of(st.st_mode) + ")",
            "path");
    PendingFile pending(path);
    if (!write_all(pending.fd(), body.data(), body.size()))
        throw_errno(errno, "cannot write", pending.path());
    mode_t final_mode = mode.value_or(exists ? (st.st_mode & 07777) : 0644);
    if (::fchmod(pending.fd(), final_mode) != 0) throw_errno(errno, "cannot chmod", pending.path());
    // Keep the owner of a replaced file where we may (as root); otherwise it becomes ours.
    if (exists) (void)!::fchown(pending.fd(), st.st_uid, st.st_gid);
    // No fsync: sandboxes are disposable; rename alone gives readers the all-or-nothing view.
    if (::rename(pending.path().c_str(), path.c_str()) != 0)
        throw_errno(errno, "cannot write", path);
    pending.committed();
    return {{"size", body.size()}};
}

json FileService::list(const json& params) const {
    const json& p = params::object(params, {"path"});
    std::string path = path_param(p);
    std::unique_ptr<DIR, DirCloser> dir(::opendir(path.c_str()));
    if (!dir) throw_errno(errno, "cannot list", path);
    json entries = json::array();
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(dir.get())) {
        std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(std::move(name));
    }
    if (errno != 0) throw_errno(errno, "cannot list", path);
    std::sort(names.begin(), names.end());
    bool truncated = names.size() > limits_.max_list_entries;
    if (truncated) names.resize(limits_.max_list_entries);
    int dfd = ::dirfd(dir.get());
    for (const auto& name : names) {
        struct stat st {};
        // An entry removed since readdir is simply not listed.
        if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        json entry = describe(st);
        // Names are bytes on Linux; JSON needs UTF-8 (a rare non-UTF-8 name shows with U+FFFD).
        entry["name"] = utf8::to_valid(name);
        if (S_ISLNK(st.st_mode)) entry["target"] = read_link(path + "/" + name);
        entries.push_back(std::move(entry));
    }
    json result = {{"entries", std::move(entries)}};
    if (truncated) result["truncated"] = true;
    return result;
}

json FileService::mkdir(const json& params) const {
    const json& p = params::object(params, {"path", "parents", "mode"});
    std::string path = path_param(p);
    bool parents = params::opt_bool(p, "parents").value_or(false);
    mode_t mode = mode_param(p).value_or(0755);
    if (parents) {
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0) {
            if (S_ISDIR(st.st_mode)) return json::object();
            throw_errno(EEXIST, "cannot create directory", path);
        }
        create_parents(path);
    }
    if (::mkdir(path.c_str(), mode) != 0) {
        if (!(parents && errno == EEXIST)) throw_errno(errno, "cannot create directory", path);
    } else {
        ::chmod(path.c_str(), mode);  // exact mode, not masked by the umask
    }
    return json::object();
}

json FileService::remove(const json& params) const {
    const json& p = params::object(params, {"path", "recursive"});
    std::string path = path_param(p);
    bool recursive = params::opt_bool(p, "recursive").value_or(false);
    if (fs::path(path).lexically_normal() == "/")
        throw bad_request("path", "refusing to remove the root directory");
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) throw_errno(errno, "cannot remove", path);
    if (!S_ISDIR(st.st_mode)) {
        if (::unlink(path.c_str()) != 0) throw_errno(errno, "cannot remove", path);
    } else if (!recursive) {
        if (::rmdir(path.c_str()) != 0) throw_errno(errno, "cannot remove", path);
    } else {
        std::error_code ec;
        fs::remove_all(path, ec);  // does not follow symlinks inside
        if (ec) throw_errno(ec.value(), "cannot remove", path);
    }
    return json::object();
}

json FileService::stat(const json& params) const {
    const json& p = params::object(params, {"path"});
    std::string path = path_param(p);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) throw_errno(errno, "cannot stat", path);
    json result = describe(st);
    if (S_ISLNK(st.st_mode)) result["target"] = read_link(path);
    return result;
}

}  // namespace deskbox::services
