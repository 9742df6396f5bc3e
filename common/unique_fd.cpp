#include "common/unique_fd.hpp"

#include <fcntl.h>

#include <cerrno>
#include <system_error>

namespace deskbox {

UniqueFd above_stdio(UniqueFd fd) {
    if (!fd || fd.get() > 2) return fd;
    const int flags = ::fcntl(fd.get(), F_GETFD);
    const int moved = ::fcntl(fd.get(), (flags & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 3);
    if (moved < 0) throw std::system_error(errno, std::generic_category(), "fcntl F_DUPFD");
    return UniqueFd(moved);  // the low number closes with `fd`
}

Pipe Pipe::create(bool cloexec) {
    int fds[2];
    if (::pipe2(fds, cloexec ? O_CLOEXEC : 0) != 0)
        throw std::system_error(errno, std::generic_category(), "pipe2");
    return Pipe{above_stdio(UniqueFd(fds[0])), above_stdio(UniqueFd(fds[1]))};
}

bool write_all(int fd, const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        ssize_t n = ::write(fd, p, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

}  // namespace deskbox
