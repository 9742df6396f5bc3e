// An owned file descriptor, closed on destruction.
#pragma once

#include <unistd.h>

#include <utility>

namespace deskbox {

class UniqueFd {
  public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    ~UniqueFd() { reset(); }
    UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
    UniqueFd& operator=(UniqueFd&& other) noexcept {
        if (this != &other) reset(other.release());
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;

    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    explicit operator bool() const { return valid(); }
    int release() { return std::exchange(fd_, -1); }
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

  private:
    int fd_ = -1;
};

// `fd` moved to a number above 2 (close-on-exec kept). A process started with stdin, stdout or
// stderr closed hands those numbers out first, and a child's stdio made from such an fd would
// be overwritten while it is set up. Throws std::system_error.
UniqueFd above_stdio(UniqueFd fd);

// A pipe with both ends owned, both above 2. Throws std::system_error.
struct Pipe {
    UniqueFd read;
    UniqueFd write;
    static Pipe create(bool cloexec = true);
};

// Writes all bytes, retrying on EINTR/short writes. Returns false on error (errno set).
bool write_all(int fd, const void* data, std::size_t size);

}  // namespace deskbox
