#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "common/random.hpp"
#include "common/unique_fd.hpp"

namespace deskbox::atomic_file {
namespace {

[[noreturn]] void fail(int error, const std::string& what, const std::filesystem::path& path) {
    throw std::system_error(error, std::generic_category(), what + " " + path.string());
}

void sync_directory_of(const std::filesystem::path& file) {
    auto dir = file.parent_path();
    if (dir.empty()) dir = ".";
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd || ::fsync(fd.get()) != 0) fail(errno, "cannot sync the directory of", file);
}

// The temporary beside the target, removed unless committed.
class Temporary {
  public:
    explicit Temporary(const std::filesystem::path& target)
        : path_(target.parent_path() /
                ("." + target.filename().string() + "." + random::hex(6) + ".tmp")) {}
    ~Temporary() {
        if (!committed_) ::unlink(path_.c_str());
    }
    Temporary(const Temporary&) = delete;
    Temporary& operator=(const Temporary&) = delete;
    const std::filesystem::path& path() const { return path_; }
    void committed() { committed_ = true; }

  private:
    std::filesystem::path path_;
    bool committed_ = false;
};

}  // namespace

void write(const std::filesystem::path& path, std::string_view data, const Options& options) {
    Temporary temporary(path);
    {
        UniqueFd fd(::open(temporary.path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                           options.mode));
        if (!fd) fail(errno, "cannot create", temporary.path());
        // The umask may have narrowed the mode; the caller's is the one asked for.
        if (::fchmod(fd.get(), options.mode) != 0) fail(errno, "cannot chmod", temporary.path());
        if (!write_all(fd.get(), data.data(), data.size()))
            fail(errno, "cannot write", temporary.path());
        if (options.durability == Durability::power_loss && ::fsync(fd.get()) != 0)
            fail(errno, "cannot sync", temporary.path());
    }
    if (::rename(temporary.path().c_str(), path.c_str()) != 0) fail(errno, "cannot replace", path);
    temporary.committed();
    if (options.durability == Durability::power_loss) sync_directory_of(path);
}

void sync_with_directory(const std::filesystem::path& file) {
    UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd || ::fsync(fd.get()) != 0) fail(errno, "cannot sync", file);
    sync_directory_of(file);
}

}  // namespace deskbox::atomic_file
