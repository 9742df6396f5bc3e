#include "streaming/vnc/library_globals.hpp"

#include <rfb/rfb.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deskbox::streaming::vnc {

namespace {

constexpr int kClientTimeoutMs = 5000;  // libvncserver's rfbMaxClientWait (process-wide)

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
}

}  // namespace deskbox::streaming::vnc
