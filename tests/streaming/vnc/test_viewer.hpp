// A VNC viewer for tests and benchmarks, on libvncclient: connects with a password, keeps the
// framebuffer it receives (BGRX by default, so it can be compared with a FrameMirror byte for
// byte), records the update rects, the cursor shape and position it was sent, and sends input.
// Single-threaded: call pump()/wait_until() from the thread that owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/rect.hpp"

struct _rfbClient;

namespace deskbox::testing {

class TestViewer {
  public:
    struct Options {
        std::string host = "127.0.0.1";
        int port = 0;
        std::string password;
        std::string encodings = "raw";  // libvncclient's encodings string
        bool remote_cursor = false;     // ask for cursor shapes and positions
        bool bgrx = true;               // pixel format B,G,R,X in memory (else libvncclient's RGBX)
        bool shared = true;
    };

    struct RemoteCursor {
        int width = 0, height = 0, xhot = 0, yhot = 0, bytes_per_pixel = 0;
        std::vector<std::uint8_t> pixels;  // width*height*bytes_per_pixel, client format
        std::vector<std::uint8_t> mask;    // width*height, nonzero = opaque
    };

    // nullptr when the connection or the authentication fails.
    static std::unique_ptr<TestViewer> connect(const Options& options);
    ~TestViewer();
    TestViewer(const TestViewer&) = delete;
    TestViewer& operator=(const TestViewer&) = delete;

    // Handles server messages for up to `timeout`; false once the connection is gone.
    bool pump(std::chrono::milliseconds timeout);
    // Pumps until `done()` or the connection ends or `timeout` passes; returns done().
    bool wait_until(const std::function<bool()>& done,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20));
    bool closed() const { return closed_; }

    int width() const { return width_; }
    int height() const { return height_; }
    const std::vector<std::uint8_t>& framebuffer() const { return framebuffer_; }
    std::uint64_t updates() const { return updates_; }  // complete FramebufferUpdates
    // Rects received since the last call.
    std::vector<Rect> take_rects();
    const std::optional<RemoteCursor>& cursor_shape() const { return cursor_shape_; }
    int cursor_shapes_received() const { return cursor_shapes_; }
    const std::optional<std::pair<int, int>>& cursor_position() const { return cursor_position_; }
    std::string desktop_name() const;

    bool send_pointer(int x, int y, int button_mask);
    bool send_key(std::uint32_t keysym, bool down);
    bool send_cut_text(const std::string& latin1);
    bool request_full_update();

  private:
    struct Private {};

  public:
    explicit TestViewer(Private) {}

  private:
    static TestViewer& of(_rfbClient* client);
    static signed char on_malloc_framebuffer(_rfbClient* client);
    static void on_update(_rfbClient* client, int x, int y, int w, int h);
    static void on_finished_update(_rfbClient* client);
    static char* on_password(_rfbClient* client);
    static void on_cursor_shape(_rfbClient* client, int xhot, int yhot, int width, int height,
                                int bytes_per_pixel);
    static signed char on_cursor_position(_rfbClient* client, int x, int y);

    _rfbClient* client_ = nullptr;
    std::string password_;
    bool closed_ = false;
    int width_ = 0, height_ = 0;
    std::vector<std::uint8_t> framebuffer_;
    std::vector<Rect> rects_;
    std::uint64_t updates_ = 0;
    std::optional<RemoteCursor> cursor_shape_;
    int cursor_shapes_ = 0;
    std::optional<std::pair<int, int>> cursor_position_;
};

}  // namespace deskbox::testing
