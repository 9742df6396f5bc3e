#include "tests/streaming/vnc/test_viewer.hpp"

#include <rfb/rfbclient.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace deskbox::testing {

namespace {

// libvncclient prints every step of the handshake; tests only want their own output.
void quiet_log(const char*, ...) {}

int tag;  // its address identifies our client data

// libvncclient writes without MSG_NOSIGNAL: a server that closes first (stop() with clients
// connected) must give the client EPIPE, not kill the test process.
const bool sigpipe_ignored = [] {
    std::signal(SIGPIPE, SIG_IGN);
    return true;
}();

}  // namespace

std::unique_ptr<TestViewer> TestViewer::connect(const Options& options) {
    static std::once_flag quiet;
    std::call_once(quiet, [] {
        if (std::getenv("DESKBOX_VNC_LOG")) return;  // keep libvncclient's log for debugging
        rfbClientLog = quiet_log;
        rfbClientErr = quiet_log;
    });

    auto viewer = std::make_unique<TestViewer>(Private{});
    viewer->password_ = options.password;
    rfbClient* client = rfbGetClient(8, 3, 4);
    if (!client) return nullptr;
    if (options.bgrx) {
        client->format.redShift = 16;
        client->format.greenShift = 8;
        client->format.blueShift = 0;
    }
    std::free(client->serverHost);
    client->serverHost = strdup(options.host.c_str());
    client->serverPort = options.port;
    client->appData.encodingsString = strdup(options.encodings.c_str());
    client->appData.useRemoteCursor = options.remote_cursor ? TRUE : FALSE;
    client->appData.enableJPEG = FALSE;  // lossless, so pixels compare exactly
    client->appData.shareDesktop = options.shared ? TRUE : FALSE;
    client->MallocFrameBuffer = on_malloc_framebuffer;
    client->GotFrameBufferUpdate = on_update;
    client->FinishedFrameBufferUpdate = on_finished_update;
    client->GetPassword = on_password;
    client->GotCursorShape = on_cursor_shape;
    client->HandleCursorPos = on_cursor_position;
    rfbClientSetClientData(client, &tag, viewer.get());
    // The encodings string is ours to free; libvncclient only reads it.
    const char* encodings = client->appData.encodingsString;
    if (!rfbInitClient(client, nullptr, nullptr)) {  // frees the client on failure
        std::free(const_cast<char*>(encodings));
        return nullptr;
    }
    viewer->client_ = client;
    return viewer;
}

TestViewer::~TestViewer() {
    if (client_) {
        const char* encodings = client_->appData.encodingsString;
        client_->frameBuffer = nullptr;  // ours (framebuffer_), not libvncclient's
        rfbClientCleanup(client_);
        std::free(const_cast<char*>(encodings));
    }
}

TestViewer& TestViewer::of(rfbClient* client) {
    return *static_cast<TestViewer*>(rfbClientGetClientData(client, &tag));
}

rfbBool TestViewer::on_malloc_framebuffer(rfbClient* client) {
    TestViewer& self = of(client);
    self.width_ = client->width;
    self.height_ = client->height;
    std::size_t bytes_per_pixel = client->format.bitsPerPixel / 8;
    self.framebuffer_.assign(
        static_cast<std::size_t>(client->width) * client->height * bytes_per_pixel, 0);
    client->frameBuffer = self.framebuffer_.data();
    return TRUE;
}

void TestViewer::on_update(rfbClient* client, int x, int y, int w, int h) {
    of(client).rects_.push_back({x, y, w, h});
}

void TestViewer::on_finished_update(rfbClient* client) {
    ++of(client).updates_;
}

char* TestViewer::on_password(rfbClient* client) {
    return strdup(of(client).password_.c_str());  // libvncclient frees it
}

void TestViewer::on_cursor_shape(rfbClient* client, int xhot, int yhot, int width, int height,
                                 int bytes_per_pixel) {
    TestViewer& self = of(client);
    RemoteCursor shape{width, height, xhot, yhot, bytes_per_pixel, {}, {}};
    std::size_t pixels = static_cast<std::size_t>(width) * height;
    if (client->rcSource)
        shape.pixels.assign(client->rcSource, client->rcSource + pixels * bytes_per_pixel);
    if (client->rcMask) shape.mask.assign(client->rcMask, client->rcMask + pixels);
    // libvncclient allocates these afresh for every shape without freeing the last ones.
    std::free(client->rcSource);
    std::free(client->rcMask);
    client->rcSource = nullptr;
    client->rcMask = nullptr;
    self.cursor_shape_ = std::move(shape);
    ++self.cursor_shapes_;
}

rfbBool TestViewer::on_cursor_position(rfbClient* client, int x, int y) {
    of(client).cursor_position_ = std::make_pair(x, y);
    return TRUE;
}

bool TestViewer::pump(std::chrono::milliseconds timeout) {
    if (closed_) return false;
    // libvncclient reads ahead into its own buffer, which select() does not see.
    int ready = client_->buffered > 0
                    ? 1
                    : WaitForMessage(client_, static_cast<unsigned>(timeout.count()) * 1000);
    if (ready < 0 || (ready > 0 && !HandleRFBServerMessage(client_))) closed_ = true;
    return !closed_;
}

bool TestViewer::wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (closed_ || std::chrono::steady_clock::now() >= deadline) return done();
        pump(std::chrono::milliseconds(50));
    }
    return true;
}

std::vector<Rect> TestViewer::take_rects() {
    return std::exchange(rects_, {});
}

std::string TestViewer::desktop_name() const {
    return client_->desktopName ? client_->desktopName : "";
}

bool TestViewer::send_pointer(int x, int y, int button_mask) {
    return SendPointerEvent(client_, x, y, button_mask);
}

bool TestViewer::send_key(std::uint32_t keysym, bool down) {
    return SendKeyEvent(client_, keysym, down ? TRUE : FALSE);
}

bool TestViewer::send_cut_text(const std::string& latin1) {
    std::string copy = latin1;
    return SendClientCutText(client_, copy.data(), static_cast<int>(copy.size()));
}

bool TestViewer::request_full_update() {
    return SendFramebufferUpdateRequest(client_, 0, 0, client_->width, client_->height, FALSE);
}

}  // namespace deskbox::testing
