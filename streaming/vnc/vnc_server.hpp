// A per-sandbox VNC (RFB) server on libvncserver that serves the sandbox's FrameMirror and
// hands keyboard/pointer/clipboard input from control-mode clients to an InputHandler.
//
// Design
// - One thread per server owns the libvncserver screen and does everything on it: it polls
//   the listening socket, the client sockets and an eventfd that the mirror's listener pokes on
//   every change; then, in this order, it accepts new clients, copies only the rects that
//   changed since its last FrameSubscriber update into libvncserver's framebuffer (marking them
//   modified), updates the cursor, and lets libvncserver read client messages and send the
//   updates clients asked for (rfbProcessEvents with a zero timeout). libvncserver's own
//   thread-per-client mode is not used: in 0.9.14 it leaks the thread of every client that
//   disconnects by itself, races on client teardown, and reads the framebuffer while it is
//   written. With one thread nothing is shared with libvncserver, so the framebuffer is never
//   torn and shutdown is deterministic. The price: clients of one sandbox share that thread.
//   RFB is pull-based (a client is sent an update only after it asked for one), so a client that
//   stops reading holds the thread only while one update does not fit in its socket buffers;
//   then libvncserver's write timeout (set to 5 s, process-wide) drops it and the others go on.
// - New connections: libvncserver 0.9.14 peeks at a new socket's first 4 bytes to tell RFB
//   from WebSocket or TLS, and spins forever on a client that sent 1-3 bytes (any client could
//   stall the server; found by the fuzzer). So libvncserver gets one end of a socketpair that
//   already holds "RFB ", writes its version there, and we forward it and dup3 the real socket
//   into the same descriptor (hand_over): no peek on the client, no 100 ms wait per connection,
//   and no WebSocket or TLS on the RFB port (deskboxd's VNC WebSocket is vnc_proxy.cpp).
// - Pixels: the framebuffer is BGRX like the mirror (serverFormat red shift 16, green 8,
//   blue 0), so damage is a plain row copy and clients with that format get it untranslated. A
//   new mirror generation or size reallocates it (rfbNewFramebuffer; clients that understand
//   NewFBSize get the new size, then everything; a client that cannot resize is disconnected
//   rather than shown a clipped picture).
// - Cursor: the mirror's premultiplied ARGB shape becomes a libvncserver rich cursor (colours
//   un-premultiplied, alpha kept for blending, a 1-bit mask at alpha >= 50% for the wire) at the
//   mirror's pointer position. A client that takes both cursor shapes and PointerPos
//   (libvncclient viewers, vncsnapshot -cursor) gets the shape and the agent's pointer position
//   and draws it itself. Every other client (TigerVNC and noVNC take shapes but not PointerPos;
//   some take neither) gets the cursor alpha-blended into its pixels by libvncserver, since
//   drawing the shape at the viewer's own mouse would hide where the agent's pointer is. So
//   view-only spectators always see the agent's pointer. A client is not sent back a position
//   it sent itself, so a controlling viewer's own pointer does not jump. Cursors too large for
//   one RFB message (libvncserver's 32 KiB buffer, about 88x88) are scaled down by an integer
//   factor.
// - Authentication: VNC authentication (DES challenge) with the control password, or with the
//   optional view-only password. VNC authentication only uses the first 8 characters of a
//   password; longer ones are accepted, the rest is ignored (every VNC client does the same).
//   Input from view-only clients never reaches the InputHandler: it is dropped and counted.
// - Only plain TCP RFB on the given address: libvncserver's HTTP server stays off. Every client
//   is treated as shared, so a client asking for exclusive access cannot disconnect the others.
// - Closing the mirror disconnects every client and refuses new ones; stop() or the destructor
//   disconnects clients, ends the thread and frees everything.
//
// Process-wide effects (libvncserver keeps globals): its log goes nowhere unless the
// environment has DESKBOX_VNC_LOG=1; its client read/write timeout is 5 s; rfbGetScreen(),
// which re-initialises a global mutex, runs while no server thread is inside libvncserver.
//
// Threading: the public methods may be called from any thread. The InputHandler callbacks run
// on the server's thread, one at a time, in the order the events arrived; they must be quick
// (hand the event to the input queue, don't wait for the agent) because the clients of this
// sandbox wait meanwhile, and they must not create, stop or destroy any VncServer (deadlock).
// The mirror must outlive the server.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "streaming/frame_mirror.hpp"

namespace deskbox::streaming {

class VncServer {
  public:
    // libvncserver select()s on its clients' sockets, so each client's descriptor is moved
    // below FD_SETSIZE, to numbers kept back for it. A process that will hold more than 1024
    // descriptors (deskboxd) calls this at start, while low numbers are still free; otherwise
    // the first server keeps them back.
    static void reserve_descriptors();

    struct Options {
        std::string listen_address = "127.0.0.1";  // numeric IPv4 or IPv6 address
        int port = 0;                              // 0: a free port chosen by the kernel
        // Required, non-empty. VNC authentication only uses the first 8 characters.
        std::string password;
        // Optional (empty: no view-only access). Must differ from `password` in its first 8
        // characters, since only those are compared.
        std::string view_only_password;
        std::string desktop_name = "deskbox";
        int max_clients = 16;  // connections beyond this are closed at once
    };

    // Where deskboxd maps VNC input into the sandbox's input path. Any member may be empty
    // (that kind of input is then dropped, but still counted as forwarded).
    struct InputHandler {
        // RFB PointerEvent: screen coordinates as the client sent them (a client that has not
        // seen a resize yet may send points outside the current screen), and the button mask
        // (bit 0 left, 1 middle, 2 right, 3/4 wheel up/down, 5/6 wheel left/right). Turning
        // mask changes into presses, releases and scroll steps is the caller's job.
        std::function<void(int x, int y, int button_mask)> pointer;
        // RFB KeyEvent: an X keysym, pressed or released.
        std::function<void(std::uint32_t keysym, bool down)> key;
        // ClientCutText as valid UTF-8, ending at its first NUL (classic cut text is ISO
        // 8859-1, converted; the extended clipboard's bytes that are not UTF-8 become U+FFFD).
        std::function<void(std::string utf8)> cut_text;
    };

    struct Stats {
        std::uint64_t clients = 0;               // connections open now (any state)
        std::uint64_t connections_accepted = 0;  // since start
        std::uint64_t connections_refused = 0;   // over max_clients, mirror closed, fd too high
        std::uint64_t control_logins = 0;        // successful authentications, by mode
        std::uint64_t view_only_logins = 0;
        std::uint64_t failed_logins = 0;
        std::uint64_t input_events = 0;              // handed to the InputHandler
        std::uint64_t ignored_input_events = 0;      // from view-only clients, dropped
        std::uint64_t input_handler_errors = 0;      // callbacks that threw (swallowed)
        std::uint64_t mirror_updates = 0;            // mirror changes applied to the framebuffer
        std::uint64_t rects_copied = 0;              // damage rects copied into it
        std::uint64_t resizes = 0;                   // framebuffer reallocations after the first
        std::uint64_t framebuffer_updates_sent = 0;  // RFB FramebufferUpdate messages, all clients
        std::uint64_t rects_sent = 0;                // rectangles in them (pseudo-rects included)
        std::uint64_t bytes_sent = 0;
        bool mirror_closed = false;
    };

    // Binds and starts serving. Throws ParameterError for a bad option (field named; a port in
    // use is field "port"), std::system_error for other socket failures.
    VncServer(const FrameMirror& mirror, Options options, InputHandler input = {});
    ~VncServer();  // stop()
    VncServer(const VncServer&) = delete;
    VncServer& operator=(const VncServer&) = delete;
    VncServer(VncServer&&) = delete;
    VncServer& operator=(VncServer&&) = delete;

    // The port it listens on (the chosen one when Options::port was 0); still valid after stop.
    int port() const;
    const std::string& listen_address() const;

    // Disconnects every client, stops the thread and frees libvncserver's state; the port is
    // released when this returns. Idempotent.
    void stop();

    std::uint64_t clients() const;
    std::uint64_t ignored_input_events() const;
    Stats stats() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::streaming
