#include "streaming/vnc/vnc_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>

#include <rfb/rfb.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"
#include "common/utf8.hpp"

namespace deskbox::streaming {

static_assert(std::endian::native == std::endian::little,
              "the BGRX server pixel format below assumes a little-endian host");

namespace {

constexpr int kPlaceholderWidth = 320;  // framebuffer size before the mirror has a screen
constexpr int kPlaceholderHeight = 240;
constexpr int kClientTimeoutMs = 5000;  // libvncserver's rfbMaxClientWait (process-wide)
constexpr std::chrono::milliseconds kIdlePoll{1000};
constexpr std::chrono::milliseconds kAcceptBackoff{100};  // after EMFILE and friends
constexpr std::size_t kEchoMemory = 64;                   // pointer positions remembered per client
constexpr int kPasswordChars = 8;                         // all VNC authentication looks at

// ---- libvncserver's process-wide state ----
//
// rfbGetScreen() re-initialises a global mutex (rfbClientListMutex) that every server's thread
// locks while walking its client list; re-initialising it while another thread waits on it can
// leave that thread asleep forever. So every server thread holds this gate shared while it is
// inside libvncserver, and rfbGetScreen() runs with it held exclusively. Writers go first, so a
// busy set of servers cannot starve a new one.
class LibraryGate {
  public:
    void lock_shared() {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !writer_active_ && writers_waiting_ == 0; });
        ++readers_;
    }
    void unlock_shared() {
        std::lock_guard lock(mutex_);
        if (--readers_ == 0) changed_.notify_all();
    }
    void lock() {
        std::unique_lock lock(mutex_);
        ++writers_waiting_;
        changed_.wait(lock, [&] { return !writer_active_ && readers_ == 0; });
        --writers_waiting_;
        writer_active_ = true;
    }
    void unlock() {
        std::lock_guard lock(mutex_);
        writer_active_ = false;
        changed_.notify_all();
    }

  private:
    std::mutex mutex_;
    std::condition_variable changed_;
    int readers_ = 0;
    int writers_waiting_ = 0;
    bool writer_active_ = false;
};

LibraryGate& library_gate() {
    static LibraryGate gate;
    return gate;
}

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

// Once per process, under the exclusive gate: logging, the client timeout, and the lazily
// initialised extension mutex (initialised on first use without a lock inside libvncserver).
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

void set_bgrx_format(rfbScreenInfoPtr screen) {
    rfbPixelFormat& format = screen->serverFormat;
    format.bitsPerPixel = 32;
    format.depth = 24;
    format.bigEndian = FALSE;
    format.trueColour = TRUE;
    format.redMax = format.greenMax = format.blueMax = 255;
    // Little-endian pixel value B | G << 8 | R << 16: memory order B, G, R, X.
    format.redShift = 16;
    format.greenShift = 8;
    format.blueShift = 0;
}

// The key VNC authentication derives from a password: its first 8 characters, NUL padded.
std::array<char, kPasswordChars + 1> password_key(const std::string& password) {
    std::array<char, kPasswordChars + 1> key{};
    std::memcpy(key.data(), password.data(),
                std::min<std::size_t>(password.size(), kPasswordChars));
    return key;
}

bool constant_time_equal(const unsigned char* a, const unsigned char* b, std::size_t size) {
    unsigned char difference = 0;
    for (std::size_t i = 0; i < size; ++i) difference |= a[i] ^ b[i];
    return difference == 0;
}

// Cut text ends at its first NUL: the extended clipboard's text is NUL-terminated (TigerVNC
// counts the terminator in the size), and in classic cut text a NUL would end the text for the
// guest's C-string consumers anyway.
std::size_t cut_text_size(const char* text, int length) {
    auto size = static_cast<std::size_t>(std::max(0, length));
    const void* nul = std::memchr(text, '\0', size);
    return nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - text) : size;
}

struct CursorDeleter {
    void operator()(rfbCursor* cursor) const { rfbFreeCursor(cursor); }
};
using CursorPtr = std::unique_ptr<rfbCursor, CursorDeleter>;

// Bytes a cursor takes in one RFB message (header, XCursor colours, pixels at 4 bytes, mask).
std::size_t cursor_wire_bytes(int width, int height) {
    auto w = static_cast<std::size_t>(width), h = static_cast<std::size_t>(height);
    return 12 + 6 + w * h * 4 + (w + 7) / 8 * h;
}

// libvncserver frees cursors with free(), so every part is malloc'd.
CursorPtr make_cursor(const CursorImage& image) {
    // Larger cursors than one update buffer holds would make libvncserver give up mid-message.
    int factor = 1;
    while (cursor_wire_bytes((image.width + factor - 1) / factor,
                             (image.height + factor - 1) / factor) > UPDATE_BUF_SIZE - 64)
        ++factor;
    int width = (image.width + factor - 1) / factor;
    int height = (image.height + factor - 1) / factor;
    auto pixels = static_cast<std::size_t>(width) * height;
    int mask_stride = (width + 7) / 8;

    CursorPtr cursor(static_cast<rfbCursor*>(std::calloc(1, sizeof(rfbCursor))));
    if (!cursor) throw std::bad_alloc();
    cursor->cleanup = cursor->cleanupSource = cursor->cleanupMask = cursor->cleanupRichSource =
        TRUE;
    cursor->width = static_cast<unsigned short>(width);
    cursor->height = static_cast<unsigned short>(height);
    cursor->xhot = static_cast<unsigned short>(image.xhot / factor);
    cursor->yhot = static_cast<unsigned short>(image.yhot / factor);
    cursor->richSource = static_cast<unsigned char*>(std::malloc(pixels * 4));
    cursor->alphaSource = static_cast<unsigned char*>(std::malloc(pixels));
    cursor->mask =
        static_cast<unsigned char*>(std::calloc(static_cast<std::size_t>(mask_stride) * height, 1));
    if (!cursor->richSource || !cursor->alphaSource || !cursor->mask) throw std::bad_alloc();
    // Straight (not premultiplied) colour: the wire format has no alpha, only the 1-bit mask,
    // and libvncserver multiplies again when it blends into the pixels.
    cursor->alphaPreMultiplied = FALSE;

    for (int y = 0; y < height; ++y) {
        for (int x = 0; x < width; ++x) {
            std::uint32_t argb =
                image.argb[static_cast<std::size_t>(y * factor) * image.width + x * factor];
            std::uint32_t alpha = argb >> 24;
            auto straight = [alpha](std::uint32_t premultiplied) -> std::uint32_t {
                if (alpha == 0) return 0;
                return std::min<std::uint32_t>(255, (premultiplied * 255 + alpha / 2) / alpha);
            };
            std::uint32_t pixel = straight((argb >> 16) & 0xFF) << 16 |
                                  straight((argb >> 8) & 0xFF) << 8 | straight(argb & 0xFF);
            std::size_t index = static_cast<std::size_t>(y) * width + x;
            std::memcpy(cursor->richSource + index * 4, &pixel, 4);
            cursor->alphaSource[index] = static_cast<unsigned char>(alpha);
            if (alpha >= 128)
                cursor->mask[static_cast<std::size_t>(y) * mask_stride + x / 8] |=
                    static_cast<unsigned char>(0x80 >> (x % 8));
        }
    }
    return cursor;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

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
            std::shared_lock shared(library_gate());
            destroy_screen();
        }
    }

    // ---- setup (constructor thread) ----
    void validate_options();
    void bind_listener();
    void create_screen();
    void start();

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
    static void on_pointer(int button_mask, int x, int y, rfbClientPtr client);
    static void on_key(rfbBool down, rfbKeySym keysym, rfbClientPtr client);
    static void on_cut_text(char* text, int length, rfbClientPtr client);
    static void on_cut_text_utf8(char* text, int length, rfbClientPtr client);
    bool accept_input(rfbClientPtr client);
    template <typename Call>
    void deliver(Call&& call);
    void add_client_totals(rfbClientPtr client, std::uint64_t& updates, std::uint64_t& rects,
                           std::uint64_t& bytes) const;

    const FrameMirror& mirror;
    Options options;
    InputHandler input;
    std::string bound_address;
    int bound_port = 0;
    std::array<char, kPasswordChars + 1> control_key{};
    std::array<char, kPasswordChars + 1> view_only_key{};
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

void VncServer::Impl::validate_options() {
    if (options.password.empty())
        throw ParameterError("password", "must not be empty (VNC authentication is required)");
    if (options.password.find('\0') != std::string::npos)
        throw ParameterError("password", "must not contain NUL characters");
    if (options.view_only_password.find('\0') != std::string::npos)
        throw ParameterError("view_only_password", "must not contain NUL characters");
    control_key = password_key(options.password);
    has_view_only = !options.view_only_password.empty();
    if (has_view_only) {
        view_only_key = password_key(options.view_only_password);
        if (view_only_key == control_key)
            throw ParameterError("view_only_password",
                                 "must differ from password in its first 8 characters (VNC "
                                 "authentication ignores the rest)");
    }
    if (options.port < 0 || options.port > 65535)
        throw ParameterError(
            "port", "must be 0..65535 (0: any free port), got " + std::to_string(options.port));
    if (options.max_clients < 1)
        throw ParameterError("max_clients",
                             "must be at least 1, got " + std::to_string(options.max_clients));
    if (options.desktop_name.find('\0') != std::string::npos)
        throw ParameterError("desktop_name", "must not contain NUL characters");
}

void VncServer::Impl::bind_listener() {
    sockaddr_storage address{};
    socklen_t address_size = 0;
    int family = AF_INET;
    if (auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
        inet_pton(AF_INET, options.listen_address.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(static_cast<std::uint16_t>(options.port));
        address_size = sizeof(sockaddr_in);
    } else if (auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
               inet_pton(AF_INET6, options.listen_address.c_str(), &v6->sin6_addr) == 1) {
        family = AF_INET6;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(static_cast<std::uint16_t>(options.port));
        address_size = sizeof(sockaddr_in6);
    } else {
        throw ParameterError("listen_address", "expected a numeric IPv4 or IPv6 address, got \"" +
                                                   options.listen_address + "\"");
    }
    std::string where =
        (family == AF_INET6 ? "[" + options.listen_address + "]" : options.listen_address) + ":" +
        std::to_string(options.port);

    UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw std::system_error(errno, std::generic_category(), "vnc: socket");
    int one = 1;
    // Lets a restarted server take its port back from TIME_WAIT; a live listener still wins.
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (family == AF_INET6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), address_size) != 0) {
        int error = errno;
        if (error == EADDRINUSE) throw ParameterError("port", where + " is already in use");
        if (error == EADDRNOTAVAIL)
            throw ParameterError("listen_address",
                                 options.listen_address + " is not an address of this host");
        if (error == EACCES) throw ParameterError("port", "not allowed to listen on " + where);
        throw std::system_error(error, std::generic_category(), "vnc: bind " + where);
    }
    if (::listen(fd.get(), 64) != 0)
        throw std::system_error(errno, std::generic_category(), "vnc: listen " + where);
    if (fd.get() >= FD_SETSIZE)
        throw std::system_error(EMFILE, std::generic_category(),
                                "vnc: descriptor above FD_SETSIZE (libvncserver uses select)");
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &address_size) != 0)
        throw std::system_error(errno, std::generic_category(), "vnc: getsockname");
    bound_port = family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    bound_address = options.listen_address;
    listen_fd = std::move(fd);

    wake_fd = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd) throw std::system_error(errno, std::generic_category(), "vnc: eventfd");
}

void VncServer::Impl::create_screen() {
    // Listen before the first poll, so no change between that poll and the listener is lost.
    listener = mirror.listen([this] { wake(); });
    FrameUpdate first = subscriber.poll();
    int width = kPlaceholderWidth, height = kPlaceholderHeight;
    if (first.snapshot.frame) {
        width = first.snapshot.frame->width;
        height = first.snapshot.frame->height;
    }
    framebuffer.assign(static_cast<std::size_t>(width) * height * kBytesPerPixel, 0);

    {
        std::unique_lock exclusive(library_gate());
        init_library_once();
        int argc = 1;
        char program[] = "deskbox-vnc";
        char* argv[] = {program, nullptr};
        screen = rfbGetScreen(&argc, argv, width, height, 8, 3, 4);
    }
    if (!screen) throw std::runtime_error("vnc: rfbGetScreen failed");

    screen->screenData = this;
    screen->desktopName = options.desktop_name.c_str();
    screen->frameBuffer = reinterpret_cast<char*>(framebuffer.data());
    set_bgrx_format(screen);
    // No sockets of libvncserver's own: we accept on ours and hand clients over.
    screen->autoPort = FALSE;
    screen->port = 0;
    screen->ipv6port = 0;
    screen->udpPort = 0;
    screen->httpPort = 0;
    screen->http6Port = 0;
    screen->httpDir = nullptr;
    screen->httpEnableProxyConnect = FALSE;
    screen->ignoreSIGPIPE = FALSE;  // the server thread blocks SIGPIPE instead
    screen->alwaysShared = TRUE;
    screen->neverShared = FALSE;
    screen->deferUpdateTime = 0;
    screen->deferPtrUpdateTime = 0;
    screen->permitFileTransfer = FALSE;
    screen->cursor = nullptr;  // no default "X" cursor before the guest sent one
    // Any non-null value makes libvncserver demand VNC authentication; on_password decides.
    screen->authPasswdData = this;
    screen->passwordCheck = on_password;
    screen->newClientHook = on_new_client;
    screen->displayHook = on_display;
    screen->ptrAddEvent = on_pointer;
    screen->kbdAddEvent = on_key;
    screen->setXCutText = on_cut_text;
    screen->setXCutTextUTF8 = on_cut_text_utf8;

    {
        std::shared_lock shared(library_gate());
        rfbInitServer(screen);
    }
    if (screen->listenSock != RFB_INVALID_SOCKET || screen->listen6Sock != RFB_INVALID_SOCKET ||
        screen->httpListenSock != RFB_INVALID_SOCKET)
        throw std::runtime_error("vnc: libvncserver opened a listening socket of its own");

    std::shared_lock shared(library_gate());
    apply(first);
}

void VncServer::Impl::start() {
    thread = std::thread([this] { run(); });
}

void VncServer::Impl::wake() {
    std::uint64_t one = 1;
    // EAGAIN only when the counter is saturated, i.e. a wake-up is pending anyway.
    [[maybe_unused]] auto written = ::write(wake_fd.get(), &one, sizeof(one));
}

bool VncServer::Impl::drain_wake() {
    std::uint64_t count = 0;
    return ::read(wake_fd.get(), &count, sizeof(count)) == sizeof(count);
}

void VncServer::Impl::run() {
    // libvncserver writes to sockets without MSG_NOSIGNAL. SIGPIPE from a write goes to the
    // writing thread, so blocking it here turns a vanished client into EPIPE without touching
    // the process-wide disposition.
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);

    std::vector<pollfd> fds;
    while (!stop_requested.load()) {
        fds.clear();
        fds.push_back({wake_fd.get(), POLLIN, 0});
        bool listening = std::chrono::steady_clock::now() >= accept_paused_until;
        if (listening) fds.push_back({listen_fd.get(), POLLIN, 0});
        for (const auto& entry : clients)
            if (entry.first->sock != RFB_INVALID_SOCKET)
                fds.push_back({entry.first->sock, POLLIN, 0});
        auto timeout = listening ? kIdlePoll : kAcceptBackoff;
        int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
        if (ready < 0 && errno != EINTR) break;  // cannot happen with valid fds
        if (stop_requested.load()) break;

        std::shared_lock shared(library_gate());
        try {
            if (listening && (fds[1].revents & POLLIN)) accept_clients();
            if (fds[0].revents & POLLIN) {
                drain_wake();
                apply(subscriber.poll());
            }
            // Reads what clients sent (at most a message each), sends the updates they asked for.
            rfbProcessEvents(screen, 0);
            after_events();
        } catch (const std::exception& error) {
            // Out of memory for a frame or cursor: skip this change rather than end the process.
            std::fprintf(stderr, "vnc: port %d: %s\n", bound_port, error.what());
        }
        publish_stats();
    }

    std::shared_lock shared(library_gate());
    destroy_screen();
    publish_stats();
}

void VncServer::Impl::accept_clients() {
    for (;;) {
        int raw = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (raw < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)  // out of descriptors or memory
                accept_paused_until = std::chrono::steady_clock::now() + kAcceptBackoff;
            return;
        }
        UniqueFd connection(raw);
        // libvncserver puts client sockets in select() sets, so a descriptor at or above
        // FD_SETSIZE would overflow them.
        if (mirror_closed || clients.size() >= static_cast<std::size_t>(options.max_clients) ||
            connection.get() >= FD_SETSIZE) {
            counters.refused.fetch_add(1);
            continue;  // closed here: the client sees the connection end at once
        }
        counters.accepted.fetch_add(1);
        hand_over(std::move(connection));
    }
}

// libvncserver 0.9.14's rfbNewClient first peeks at 4 bytes of the client's socket (WebSocket
// and TLS detection, waiting up to 100 ms), and that peek spins forever when 1 to 3 bytes are
// buffered: it takes the short read for EAGAIN (a stale errno) and select() says readable
// again. A client that sent "RFB" and nothing more, or closed after it, held the server thread
// at full CPU for good, and stop() with it (found by streaming/vnc/fuzz). So rfbNewClient never
// sees the client's socket: it gets one end of a socketpair that already holds "RFB " (plain RFB,
// no wait) and writes its ProtocolVersion there. That goes on to the client, and dup3 then puts
// the client's socket in place of that end, so the client record uses the real connection from
// its first read on. WebSocket and TLS on the RFB port go away with the peek (deskboxd's own
// WebSocket proxy speaks plain RFB to this port), and so does the 100 ms wait per connection.
void VncServer::Impl::hand_over(UniqueFd connection) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) {
        accept_paused_until = std::chrono::steady_clock::now() + kAcceptBackoff;
        return;  // out of descriptors: the client sees the connection end
    }
    UniqueFd stand_in(pair[0]), server_side(pair[1]);
    constexpr char kPeek[] = "RFB ";
    if (stand_in.get() >= FD_SETSIZE || ::send(server_side.get(), kPeek, 4, MSG_NOSIGNAL) != 4) {
        counters.refused.fetch_add(1);
        return;
    }
    // Registers the client and writes the ProtocolVersion, or closes the descriptor it got.
    rfbClientPtr client = rfbNewClient(screen, stand_in.release());
    if (!client) return;

    // The stand-in's buffer holds the 4 peek bytes, the other direction libvncserver's output.
    std::array<char, 64> greeting;
    ssize_t greeting_size = ::recv(server_side.get(), greeting.data(), greeting.size(), 0);
    int one = 1;
    ::setsockopt(connection.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // A fresh socket's send buffer always takes these few bytes at once.
    if (greeting_size <= 0 ||
        ::send(connection.get(), greeting.data(), static_cast<std::size_t>(greeting_size),
               MSG_NOSIGNAL) != greeting_size ||
        ::dup3(connection.get(), client->sock, O_CLOEXEC) < 0) {
        rfbCloseClient(client);  // freed by the next rfbProcessEvents
        return;
    }
    // libvncserver read its peer's name from the stand-in; give it the real one for its log.
    sockaddr_storage peer{};
    socklen_t peer_size = sizeof(peer);
    char host[NI_MAXHOST] = "";
    if (::getpeername(connection.get(), reinterpret_cast<sockaddr*>(&peer), &peer_size) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&peer), peer_size, host, sizeof(host), nullptr, 0,
                      NI_NUMERICHOST) == 0) {
        if (char* copy = ::strdup(host)) {
            std::free(client->host);
            client->host = copy;
        }
    }
}

void VncServer::Impl::apply(const FrameUpdate& update) {
    if (update.frame_changed || update.cursor_changed) counters.mirror_updates.fetch_add(1);
    if (update.frame_changed && update.snapshot.frame) apply_frame(update.snapshot, update.changes);
    if (update.cursor_changed || update.frame_changed) apply_cursor(update.snapshot.cursor);
    if (update.closed && !mirror_closed) {
        mirror_closed = true;
        counters.mirror_closed.store(true);
        disconnect_all();
    }
}

void VncServer::Impl::apply_frame(const FrameSnapshot& snapshot, const FrameChanges& changes) {
    const Frame& frame = *snapshot.frame;
    if (frame.width != screen->width || frame.height != screen->height) {
        resize_framebuffer(frame);
    } else if (changes.full || !have_frame || snapshot.generation != generation) {
        std::memcpy(framebuffer.data(), frame.pixels.data(), framebuffer.size());
        rfbMarkRectAsModified(screen, 0, 0, frame.width, frame.height);
        counters.rects_copied.fetch_add(1);
    } else {
        const Rect screen_rect{0, 0, frame.width, frame.height};
        for (const Rect& changed : changes.rects) {
            Rect rect = intersect(changed, screen_rect);
            if (rect.empty()) continue;
            std::size_t row_bytes = static_cast<std::size_t>(rect.width) * kBytesPerPixel;
            for (int y = rect.y; y < rect.bottom(); ++y) {
                std::size_t offset =
                    (static_cast<std::size_t>(y) * frame.width + rect.x) * kBytesPerPixel;
                std::memcpy(framebuffer.data() + offset, frame.pixels.data() + offset, row_bytes);
            }
            rfbMarkRectAsModified(screen, rect.x, rect.y, rect.right(), rect.bottom());
            counters.rects_copied.fetch_add(1);
        }
    }
    have_frame = true;
    generation = snapshot.generation;
}

void VncServer::Impl::resize_framebuffer(const Frame& frame) {
    std::vector<std::uint8_t> fresh(frame.pixels.begin(), frame.pixels.end());
    // Tells NewFBSize clients the new size and marks everything modified. It also resets the
    // server pixel format to libvncserver's RGB default, so BGRX is put back and every client's
    // translation rebuilt before anything is sent.
    rfbNewFramebuffer(screen, reinterpret_cast<char*>(fresh.data()), frame.width, frame.height, 8,
                      3, 4);
    set_bgrx_format(screen);
    for (const auto& entry : clients) screen->setTranslateFunction(entry.first);
    framebuffer.swap(fresh);  // the old pixels go only now that libvncserver stopped using them
    if (have_frame) counters.resizes.fetch_add(1);
    counters.rects_copied.fetch_add(1);
}

void VncServer::Impl::apply_cursor(const CursorState& cursor) {
    bool visible = cursor.shape && cursor.position_known && cursor.shape->width > 0 &&
                   cursor.shape->height > 0;
    if (!visible) {
        if (cursor_shape) {
            rfbSetCursor(screen, nullptr);  // frees ours; clients get an empty shape
            cursor_shape.reset();
        }
        return;
    }
    bool was_hidden = !cursor_shape;
    if (cursor.shape != cursor_shape) {
        CursorPtr made = make_cursor(*cursor.shape);
        rfbSetCursor(screen, made.release());  // frees the previous one (cleanup set)
        cursor_shape = cursor.shape;
    }
    if (was_hidden || cursor.x != screen->cursorX || cursor.y != screen->cursorY)
        move_cursor(cursor.x, cursor.y);
}

void VncServer::Impl::move_cursor(int x, int y) {
    x = std::clamp(x, 0, std::max(0, screen->width - 1));
    y = std::clamp(y, 0, std::max(0, screen->height - 1));
    screen->cursorX = x;
    screen->cursorY = y;
    // Clients that draw the cursor themselves (PointerPos) are told where it went, except a
    // client whose own pointer event put it there. Clients that don't notice the moved
    // screen->cursorX/Y and get the cursor redrawn in their pixels.
    for (auto& [client, client_state] : clients) {
        if (!client->enableCursorPosUpdates) continue;
        auto& echo = client_state.pointer_echo;
        auto own = std::find(echo.begin(), echo.end(), std::make_pair(x, y));
        if (own != echo.end()) {
            echo.erase(echo.begin(), own + 1);
            continue;
        }
        client->cursorWasMoved = TRUE;
    }
}

void VncServer::Impl::after_events() {
    bool closed_any = false;
    for (auto& [client, client_state] : clients) {
        if (client->sock == RFB_INVALID_SOCKET) continue;
        // ServerInit happens inside rfbProcessEvents and resizes only outside it, so a client
        // that just got there was told the current size.
        if (client_state.known_width == 0 && client->state == _rfbClientRec::RFB_NORMAL) {
            client_state.known_width = screen->width;
            client_state.known_height = screen->height;
        }
        // It would show a clipped or garbled picture; a viewer can reconnect.
        if (client_state.cannot_resize) {
            rfbCloseClient(client);
            closed_any = true;
        }
    }
    if (closed_any) rfbProcessEvents(screen, 0);  // frees them now, not at the next wake-up
}

void VncServer::Impl::disconnect_all() {
    // Closed now, freed (and on_client_gone called) by the next rfbProcessEvents.
    for (const auto& entry : clients)
        if (entry.first->sock != RFB_INVALID_SOCKET) rfbCloseClient(entry.first);
}

void VncServer::Impl::add_client_totals(rfbClientPtr client, std::uint64_t& updates,
                                        std::uint64_t& rects, std::uint64_t& bytes) const {
    for (rfbStatList* entry = client->statMsgList; entry; entry = entry->Next) {
        if (entry->type == rfbFramebufferUpdate) updates += entry->sentCount;
        bytes += entry->bytesSent;
    }
    for (rfbStatList* entry = client->statEncList; entry; entry = entry->Next) {
        rects += entry->sentCount;
        bytes += entry->bytesSent;
    }
}

void VncServer::Impl::publish_stats() {
    std::uint64_t updates = retired_updates, rects = retired_rects, bytes = retired_bytes;
    for (const auto& entry : clients) add_client_totals(entry.first, updates, rects, bytes);
    counters.updates_sent.store(updates);
    counters.rects_sent.store(rects);
    counters.bytes_sent.store(bytes);
    counters.clients.store(clients.size());
}

void VncServer::Impl::destroy_screen() {
    // Closes and frees every client (on_client_gone for each), then the screen and cursor.
    // Run on the server thread: libvncserver keeps encoder buffers in thread-local storage,
    // which rfbScreenCleanup frees for the calling thread only.
    rfbShutdownServer(screen, TRUE);
    rfbSetCursor(screen, nullptr);
    rfbScreenCleanup(screen);
    screen = nullptr;
    cursor_shape.reset();
}

// ---- hooks ----

enum rfbNewClientAction VncServer::Impl::on_new_client(rfbClientPtr client) {
    Impl& self = of(client);
    auto [entry, inserted] = self.clients.try_emplace(client);
    client->clientData = &entry->second;
    client->clientGoneHook = on_client_gone;
    self.counters.clients.store(self.clients.size());
    return RFB_CLIENT_ACCEPT;
}

void VncServer::Impl::on_client_gone(rfbClientPtr client) {
    Impl& self = of(client);
    self.add_client_totals(client, self.retired_updates, self.retired_rects, self.retired_bytes);
    client->clientData = nullptr;
    self.clients.erase(client);
    self.counters.clients.store(self.clients.size());
}

rfbBool VncServer::Impl::on_password(rfbClientPtr client, const char* response, int length) {
    Impl& self = of(client);
    ClientState& client_state = state(client);
    auto matches = [&](std::array<char, kPasswordChars + 1>& key) {
        if (length != CHALLENGESIZE) return false;
        unsigned char expected[CHALLENGESIZE];
        std::memcpy(expected, client->authChallenge, CHALLENGESIZE);
        rfbEncryptBytes(expected, key.data());
        return constant_time_equal(expected, reinterpret_cast<const unsigned char*>(response),
                                   CHALLENGESIZE);
    };
    if (matches(self.control_key)) {
        client_state.authenticated = true;
        client_state.view_only = false;
        self.counters.control_logins.fetch_add(1);
        return TRUE;
    }
    if (self.has_view_only && matches(self.view_only_key)) {
        client_state.authenticated = true;
        client_state.view_only = true;
        self.counters.view_only_logins.fetch_add(1);
        return TRUE;
    }
    self.counters.failed_logins.fetch_add(1);
    return FALSE;
}

void VncServer::Impl::on_display(rfbClientPtr client) {
    // libvncserver announces a new size only to clients that had asked for NewFBSize when the
    // framebuffer changed; one whose SetEncodings came after (a resize right after it
    // connected) would keep the old size. Announce it now, before this update's pixels.
    Impl& self = of(client);
    ClientState& client_state = state(client);
    if (client_state.known_width != 0 && (client_state.known_width != self.screen->width ||
                                          client_state.known_height != self.screen->height)) {
        if (client->useNewFBSize)
            client->newFBSizePending = TRUE;
        else
            client_state.cannot_resize = true;
        client_state.known_width = self.screen->width;
        client_state.known_height = self.screen->height;
    }
    // A client that takes cursor shapes but not positions (noVNC) would draw the agent's cursor
    // at its own mouse. Treat it as a client without cursor support, before this update decides
    // what to send: libvncserver then draws the cursor into its pixels, where the agent's
    // pointer really is.
    if (client->enableCursorShapeUpdates && !client->enableCursorPosUpdates) {
        client->enableCursorShapeUpdates = FALSE;
        client->useRichCursorEncoding = FALSE;
        client->cursorWasChanged = FALSE;
    }
}

bool VncServer::Impl::accept_input(rfbClientPtr client) {
    ClientState& client_state = state(client);
    if (client_state.authenticated && !client_state.view_only) {
        counters.input_events.fetch_add(1);
        return true;
    }
    counters.ignored_input.fetch_add(1);
    // libvncserver lets the client holding a button own the pointer; a spectator must not
    // lock out the controlling client that way.
    if (client->screen->pointerClient == client) client->screen->pointerClient = nullptr;
    return false;
}

template <typename Call>
void VncServer::Impl::deliver(Call&& call) {
    try {
        call();
    } catch (...) {
        // Nothing to report to over RFB; the input is lost, the count says so.
        counters.input_errors.fetch_add(1);
    }
}

void VncServer::Impl::on_pointer(int button_mask, int x, int y, rfbClientPtr client) {
    Impl& self = of(client);
    if (!self.accept_input(client)) return;
    auto& echo = state(client).pointer_echo;
    echo.emplace_back(x, y);
    if (echo.size() > kEchoMemory) echo.pop_front();
    if (self.input.pointer) self.deliver([&] { self.input.pointer(x, y, button_mask); });
}

void VncServer::Impl::on_key(rfbBool down, rfbKeySym keysym, rfbClientPtr client) {
    Impl& self = of(client);
    if (!self.accept_input(client)) return;
    if (self.input.key)
        self.deliver([&] { self.input.key(static_cast<std::uint32_t>(keysym), down != FALSE); });
}

void VncServer::Impl::on_cut_text(char* text, int length, rfbClientPtr client) {
    Impl& self = of(client);
    if (!self.accept_input(client)) return;
    if (self.input.cut_text)
        self.deliver([&] {
            self.input.cut_text(
                utf8::from_latin1(std::string_view(text, cut_text_size(text, length))));
        });
}

void VncServer::Impl::on_cut_text_utf8(char* text, int length, rfbClientPtr client) {
    Impl& self = of(client);
    if (!self.accept_input(client)) return;
    if (self.input.cut_text)
        // UTF-8 only by the client's word; the JSON call to the guest would refuse anything else.
        self.deliver([&] {
            self.input.cut_text(
                utf8::to_valid(std::string_view(text, cut_text_size(text, length))));
        });
}

// ---------------------------------------------------------------------------------------------

VncServer::VncServer(const FrameMirror& mirror, Options options, InputHandler input)
    : impl_(std::make_unique<Impl>(mirror, std::move(options), std::move(input))) {
    impl_->validate_options();
    impl_->bind_listener();
    try {
        impl_->create_screen();
        impl_->start();
    } catch (...) {
        impl_->listener.reset();
        throw;  // ~Impl frees the screen
    }
}

VncServer::~VncServer() {
    stop();
}

void VncServer::stop() {
    std::lock_guard lock(impl_->stop_mutex);
    impl_->listener.reset();  // no more wake-ups; waits for one in progress
    if (impl_->thread.joinable()) {
        impl_->stop_requested.store(true);
        impl_->wake();
        impl_->thread.join();
    }
    impl_->listen_fd.reset();
}

int VncServer::port() const {
    return impl_->bound_port;
}

const std::string& VncServer::listen_address() const {
    return impl_->bound_address;
}

std::uint64_t VncServer::clients() const {
    return impl_->counters.clients.load();
}

std::uint64_t VncServer::ignored_input_events() const {
    return impl_->counters.ignored_input.load();
}

VncServer::Stats VncServer::stats() const {
    const auto& c = impl_->counters;
    Stats stats;
    stats.clients = c.clients.load();
    stats.connections_accepted = c.accepted.load();
    stats.connections_refused = c.refused.load();
    stats.control_logins = c.control_logins.load();
    stats.view_only_logins = c.view_only_logins.load();
    stats.failed_logins = c.failed_logins.load();
    stats.input_events = c.input_events.load();
    stats.ignored_input_events = c.ignored_input.load();
    stats.input_handler_errors = c.input_errors.load();
    stats.mirror_updates = c.mirror_updates.load();
    stats.rects_copied = c.rects_copied.load();
    stats.resizes = c.resizes.load();
    stats.framebuffer_updates_sent = c.updates_sent.load();
    stats.rects_sent = c.rects_sent.load();
    stats.bytes_sent = c.bytes_sent.load();
    stats.mirror_closed = c.mirror_closed.load();
    return stats;
}

}  // namespace deskbox::streaming
