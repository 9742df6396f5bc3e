#include "common/unique_fd.hpp"

#include <fcntl.h>

#include <cerrno>
#include <system_error>

namespace deskbox {

Pipe Pipe::create(bool cloexec) {
    int fds[2];
    if (::pipe2(fds, cloexec ? O_CLOEXEC : 0) != 0)
        throw std::system_error(errno, std::generic_category(), "pipe2");
    return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
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
