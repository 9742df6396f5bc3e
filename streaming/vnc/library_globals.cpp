#include "streaming/vnc/library_globals.hpp"

#include <fcntl.h>
#include <rfb/rfb.h>
#include <sys/select.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace deskbox::streaming::vnc {

namespace {

constexpr int kClientTimeoutMs = 5000;  // libvncserver's rfbMaxClientWait (process-wide)
constexpr std::size_t kLowFdsKept = 16;

std::mutex low_fds_mutex;
std::vector<UniqueFd> low_fds;  // /dev/null placeholders below FD_SETSIZE

bool library_log_enabled() {
    static const bool enabled = [] {
        const char* value = std::getenv("DESKBOX_VNC_LOG");
        return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
    }();
    return enabled;
}

// libvncserver logs every connection to stderr; keep it quiet unless DESKBOX_VNC_LOG is set.
void library_log(const char* format, ...) {
    if (!library_log_enabled()) return;
    std::fputs("vnc: ", stderr);
    va_list args;
    va_start(args, format);
    std::vfprintf(stderr, format, args);
    va_end(args);
}

}  // namespace

void LibraryGate::lock_shared() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !writer_active_ && writers_waiting_ == 0; });
    ++readers_;
}

void LibraryGate::unlock_shared() {
    std::lock_guard lock(mutex_);
    if (--readers_ == 0) changed_.notify_all();
}

void LibraryGate::lock() {
    std::unique_lock lock(mutex_);
    ++writers_waiting_;
    changed_.wait(lock, [&] { return !writer_active_ && readers_ == 0; });
    --writers_waiting_;
    writer_active_ = true;
}

void LibraryGate::unlock() {
    std::lock_guard lock(mutex_);
    writer_active_ = false;
    changed_.notify_all();
}

LibraryGate& library_gate() {
    static LibraryGate gate;
    return gate;
}

void init_library_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        rfbLog = library_log;
        rfbErr = library_log;
        rfbMaxClientWait = kClientTimeoutMs;
        rfbGetExtensionIterator();
        rfbReleaseExtensionIterator();
    });
    refill_low_fds();
}

void refill_low_fds() {
    std::lock_guard lock(low_fds_mutex);
    while (low_fds.size() < kLowFdsKept) {
        UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!fd || fd.get() >= FD_SETSIZE) return;
        low_fds.push_back(std::move(fd));
    }
}

UniqueFd below_fd_setsize(UniqueFd fd) {
    if (!fd || fd.get() < FD_SETSIZE) return fd;
    UniqueFd lowest(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3));
    if (lowest && lowest.get() < FD_SETSIZE) return lowest;  // `fd` closes here
    std::lock_guard lock(low_fds_mutex);
    if (low_fds.empty()) return {};
    // dup3 replaces the placeholder in one step: the number is never free in between.
    int kept = low_fds.back().get();
    if (::dup3(fd.get(), kept, O_CLOEXEC) < 0) return {};
    low_fds.back().release();
    low_fds.pop_back();
    return UniqueFd(kept);
}

}  // namespace deskbox::streaming::vnc
