// VncServer's life: options, setting up libvncserver's screen, the server thread's loop, teardown
// and statistics. The other parts of Impl are listed in server_impl.hpp; the design is in
// vnc_server.hpp.
#include "streaming/vnc/vnc_server.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <system_error>

#include "streaming/vnc/server_impl.hpp"

namespace deskbox::streaming {

namespace {

constexpr int kPlaceholderWidth = 320;  // framebuffer size before the mirror has a screen
constexpr int kPlaceholderHeight = 240;
constexpr std::chrono::milliseconds kIdlePoll{1000};

}  // namespace

void VncServer::Impl::validate_options() {
    check_passwords();
    if (options.port < 0 || options.port > 65535)
        throw ParameterError(
            "port", "must be 0..65535 (0: any free port), got " + std::to_string(options.port));
    if (options.max_clients < 1)
        throw ParameterError("max_clients",
                             "must be at least 1, got " + std::to_string(options.max_clients));
    if (options.desktop_name.find('\0') != std::string::npos)
        throw ParameterError("desktop_name", "must not contain NUL characters");
}

void VncServer::reserve_descriptors() {
    std::unique_lock exclusive(vnc::library_gate());
    vnc::init_library_once();
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
        std::unique_lock exclusive(vnc::library_gate());
        vnc::init_library_once();
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
        std::shared_lock shared(vnc::library_gate());
        rfbInitServer(screen);
    }
    if (screen->listenSock != RFB_INVALID_SOCKET || screen->listen6Sock != RFB_INVALID_SOCKET ||
        screen->httpListenSock != RFB_INVALID_SOCKET)
        throw std::runtime_error("vnc: libvncserver opened a listening socket of its own");

    std::shared_lock shared(vnc::library_gate());
    apply(first);
}

void VncServer::Impl::start() {
    thread = std::thread([this] { run(); });
}

void VncServer::Impl::open_wake_fd() {
    wake_fd = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd) throw std::system_error(errno, std::generic_category(), "vnc: eventfd");
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
        auto timeout = listening ? kIdlePoll : kVncAcceptBackoff;
        int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
        if (ready < 0 && errno != EINTR) break;  // cannot happen with valid fds
        if (stop_requested.load()) break;

        std::shared_lock shared(vnc::library_gate());
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

    std::shared_lock shared(vnc::library_gate());
    destroy_screen();
    publish_stats();
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

// ---------------------------------------------------------------------------------------------

VncServer::VncServer(const FrameMirror& mirror, Options options, InputHandler input)
    : impl_(std::make_unique<Impl>(mirror, std::move(options), std::move(input))) {
    impl_->validate_options();
    impl_->bind_listener();
    impl_->open_wake_fd();
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
