// libvncserver's process-wide state, shared by every VncServer in the process: the gate that
// keeps rfbGetScreen() away from running server threads, and the one-time setup of its globals
// (log, client timeout, extension mutex).
#pragma once

#include <condition_variable>
#include <mutex>

#include "common/unique_fd.hpp"

namespace deskbox::streaming::vnc {

// rfbGetScreen() re-initialises a global mutex (rfbClientListMutex) that every server's thread
// locks while walking its client list; re-initialising it while another thread waits on it can
// leave that thread asleep forever. So every server thread holds this gate shared while it is
// inside libvncserver, and rfbGetScreen() runs with it held exclusively. Writers go first, so a
// busy set of servers cannot starve a new one.
class LibraryGate {
  public:
    void lock_shared();
    void unlock_shared();
    void lock();
    void unlock();

  private:
    std::mutex mutex_;
    std::condition_variable changed_;
    int readers_ = 0;
    int writers_waiting_ = 0;
    bool writer_active_ = false;
};

// The one gate of the process.
LibraryGate& library_gate();

// Once per process, under the exclusive gate: logging (to stderr only with DESKBOX_VNC_LOG set),
// the client read/write timeout (5 s), and the lazily initialised extension mutex (initialised on
// first use without a lock inside libvncserver).
void init_library_once();

// libvncserver select()s on its clients' sockets, so the descriptor it gets must be below
// FD_SETSIZE (1024), however many deskboxd holds (~80 sandboxes pass it). Returns `fd` itself
// if it is, else a copy at the lowest free number, else at one of a few numbers kept back for
// this since the first VNC server started (init_library_once); an invalid fd if none is free
// (the caller refuses the client). Thread-safe.
UniqueFd below_fd_setsize(UniqueFd fd);
// Keeps back low numbers again after clients went (their numbers are free then).
void refill_low_fds();

}  // namespace deskbox::streaming::vnc
