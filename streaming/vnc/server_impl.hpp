// VncServer's state and the parts that work on it (internal to streaming/vnc/). One Impl per
// server; its members are split across files by what they deal with:
//   vnc_server.cpp      options, setup, the server thread's loop, teardown, statistics
//   connections.cpp     the listening socket, accepting, handing a connection to libvncserver
//   framebuffer.cpp     mirror frames into libvncserver's framebuffer, resizes
//   cursor.cpp          the mirror's cursor as a libvncserver rich cursor, pointer echo
//   authentication.cpp  VNC passwords, logins, the view-only gate on input
//   client_input.cpp    pointer, key and clipboard events to the InputHandler
// The public contract and the design are in vnc_server.hpp.
#pragma once

#include <rfb/rfb.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"
#include "streaming/vnc/library_globals.hpp"
#include "streaming/vnc/vnc_server.hpp"

namespace deskbox::streaming {

constexpr int kVncPasswordChars = 8;                         // all VNC authentication looks at
constexpr std::chrono::milliseconds kVncAcceptBackoff{100};  // after EMFILE and friends
// The key VNC authentication derives from a password: its first 8 characters, NUL padded.
using VncPasswordKey = std::array<char, kVncPasswordChars + 1>;

struct VncServer::Impl {
    struct ClientState {
        bool authenticated = false;
        bool view_only = false;
        // Pointer positions this client sent that the mirror has not shown yet, oldest first:
        // when the mirror's pointer reaches one of them it is this client's own echo.
        std::deque<std::pair<int, int>> pointer_echo;
        // The framebuffer size this client was last told (ServerInit or NewFBSize); 0 until
        // its ServerInit went out.
        int known_width = 0, known_height = 0;
        bool cannot_resize = false;  // missed a resize it has no way to learn about
    };

    Impl(const FrameMirror& mirror_in, Options options_in, InputHandler input_in)
        : mirror(mirror_in),
          options(std::move(options_in)),
          input(std::move(input_in)),
          subscriber(mirror_in) {}

    ~Impl() {
        // Only reached with the thread joined; a constructor that failed half-way lands here.
        if (screen) {
            std::shared_lock shared(vnc::library_gate());
            destroy_screen();
        }
    }

    // ---- setup (constructor thread) ----
    void validate_options();
    void check_passwords();  // part of validate_options (authentication.cpp)
    void bind_listener();
    void open_wake_fd();
    void create_screen();
    void start();
    static void set_bgrx_format(rfbScreenInfoPtr screen);

    // ---- the server thread ----
    void run();
    void accept_clients();
    void hand_over(UniqueFd connection);
    void apply(const FrameUpdate& update);
    void apply_frame(const FrameSnapshot& snapshot, const FrameChanges& changes);
    void resize_framebuffer(const Frame& frame);
    void apply_cursor(const CursorState& cursor);
    void move_cursor(int x, int y);
    void disconnect_all();
    void after_events();
    void publish_stats();
    void destroy_screen();
    void wake();
    bool drain_wake();

    // ---- libvncserver hooks (server thread) ----
    static Impl& of(rfbClientPtr client) { return *static_cast<Impl*>(client->screen->screenData); }
    static ClientState& state(rfbClientPtr client) {
        return *static_cast<ClientState*>(client->clientData);
    }
    static enum rfbNewClientAction on_new_client(rfbClientPtr client);
    static void on_client_gone(rfbClientPtr client);
    static rfbBool on_password(rfbClientPtr client, const char* response, int length);
    static void on_display(rfbClientPtr client);
    void announce_resize(rfbClientPtr client);        // part of on_display (framebuffer.cpp)
    static void drop_empty_rects(sraRegion* region);  // on_display (framebuffer.cpp)
    static void fall_back_to_drawn_cursor(rfbClientPtr client);  // on_display (cursor.cpp)
    static void on_pointer(int button_mask, int x, int y, rfbClientPtr client);
    // A pointer position the client sent, so move_cursor does not echo it back (cursor.cpp).
    static void remember_pointer(rfbClientPtr client, int x, int y);
    static void on_key(rfbBool down, rfbKeySym keysym, rfbClientPtr client);
    static void on_cut_text(char* text, int length, rfbClientPtr client);
    static void on_cut_text_utf8(char* text, int length, rfbClientPtr client);
    bool accept_input(rfbClientPtr client);
    template <typename Call>
    void deliver(Call&& call);  // client_input.cpp
    void add_client_totals(rfbClientPtr client, std::uint64_t& updates, std::uint64_t& rects,
                           std::uint64_t& bytes) const;

    const FrameMirror& mirror;
    Options options;
    InputHandler input;
    std::string bound_address;
    int bound_port = 0;
    VncPasswordKey control_key{};
    VncPasswordKey view_only_key{};
    bool has_view_only = false;

    UniqueFd listen_fd;
    UniqueFd wake_fd;
    rfbScreenInfoPtr screen = nullptr;      // owned; freed by destroy_screen()
    std::vector<std::uint8_t> framebuffer;  // what screen->frameBuffer points at
    FrameSubscriber subscriber;
    FrameMirror::Listener listener;
    std::thread thread;
    std::atomic<bool> stop_requested{false};
    std::mutex stop_mutex;  // serialises stop()

    // Server thread only.
    std::map<rfbClientPtr, ClientState> clients;
    std::uint64_t generation = 0;
    bool have_frame = false;
    std::shared_ptr<const CursorImage> cursor_shape;  // shown now, null if hidden
    bool mirror_closed = false;
    std::chrono::steady_clock::time_point accept_paused_until{};
    std::uint64_t retired_updates = 0, retired_rects = 0, retired_bytes = 0;

    struct Counters {
        std::atomic<std::uint64_t> clients{0}, accepted{0}, refused{0}, control_logins{0},
            view_only_logins{0}, failed_logins{0}, input_events{0}, ignored_input{0},
            input_errors{0}, mirror_updates{0}, rects_copied{0}, resizes{0}, updates_sent{0},
            rects_sent{0}, bytes_sent{0};
        std::atomic<bool> mirror_closed{false};
    } counters;
};

}  // namespace deskbox::streaming
