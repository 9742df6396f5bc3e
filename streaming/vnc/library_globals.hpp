// libvncserver's process-wide state, shared by every VncServer in the process: the gate that
// keeps rfbGetScreen() away from running server threads, and the one-time setup of its globals
// (log, client timeout, extension mutex).
#pragma once

#include <condition_variable>
#include <mutex>

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

}  // namespace deskbox::streaming::vnc
