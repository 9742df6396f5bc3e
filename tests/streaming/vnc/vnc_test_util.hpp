// Shared by the VNC tests: test images, a cursor, an InputHandler that records, bounded waits.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "streaming/frame_mirror.hpp"
#include "streaming/vnc/vnc_server.hpp"
#include "tests/streaming/vnc/test_viewer.hpp"
#include "tests/support/eventually.hpp"

namespace deskbox::streaming::vnc_test {

using namespace std::chrono_literals;
using testing::TestViewer;

inline constexpr char kPassword[] = "s3cret-pw";  // 9 characters: only the first 8 count
inline constexpr char kViewPassword[] = "look-only";

// BGRX pixels with every byte depending on the position, so a misplaced or stale pixel shows.
inline std::vector<std::uint8_t> pattern(int width, int height, int seed) {
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width) * height * 4);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) {
            std::uint8_t* p = &pixels[(static_cast<std::size_t>(y) * width + x) * 4];
            p[0] = static_cast<std::uint8_t>(x * 7 + y * 3 + seed);
            p[1] = static_cast<std::uint8_t>((x ^ y) + seed * 5);
            p[2] = static_cast<std::uint8_t>(y * 11 - x + seed * 13);
            p[3] = 0;
        }
    return pixels;
}

// Smooth content (what a desktop mostly is) for checks through JPEG.
inline std::vector<std::uint8_t> smooth(int width, int height) {
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width) * height * 4);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) {
            std::uint8_t* p = &pixels[(static_cast<std::size_t>(y) * width + x) * 4];
            bool box = x > width / 4 && x < width / 2 && y > height / 3 && y < height * 2 / 3;
            p[0] = box ? 40 : static_cast<std::uint8_t>(255 * x / width);
            p[1] = box ? 200 : static_cast<std::uint8_t>(255 * y / height);
            p[2] = box ? 90 : static_cast<std::uint8_t>(128 + 100 * std::sin(x / 40.0));
            p[3] = 0;
        }
    return pixels;
}

inline void fill_mirror(FrameMirror& mirror, int width, int height, int seed) {
    mirror.reset(width, height);
    mirror.apply_damage(mirror.seq() + 1, 0, 0, width, height, pattern(width, height, seed));
}

// A 16x16 cursor: an opaque red square with a half-transparent blue border, premultiplied.
inline std::vector<std::uint8_t> cursor_argb(int size) {
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size) * size * 4);
    for (int y = 0; y < size; ++y)
        for (int x = 0; x < size; ++x) {
            bool border = x < 2 || y < 2 || x >= size - 2 || y >= size - 2;
            std::uint32_t argb = border ? 0x80000080u : 0xFFFF0000u;  // blue 255 at alpha 128
            std::memcpy(&bytes[(static_cast<std::size_t>(y) * size + x) * 4], &argb, 4);
        }
    return bytes;
}

// True when the viewer shows the mirror's frame: B, G, R equal everywhere (X is padding).
inline bool shows(const TestViewer& viewer, const FrameSnapshot& snapshot) {
    if (!snapshot.frame || viewer.width() != snapshot.width() ||
        viewer.height() != snapshot.height())
        return false;
    const auto& want = snapshot.frame->pixels;
    const auto& have = viewer.framebuffer();
    if (have.size() != want.size()) return false;
    for (std::size_t i = 0; i < want.size(); i += 4)
        if (std::memcmp(&have[i], &want[i], 3) != 0) return false;
    return true;
}

// Largest per-channel difference between the viewer's pixels and `bgrx`.
inline int max_difference(const TestViewer& viewer, const std::vector<std::uint8_t>& bgrx) {
    int worst = 0;
    for (std::size_t i = 0; i < bgrx.size() && i < viewer.framebuffer().size(); ++i) {
        if (i % 4 == 3) continue;
        worst = std::max(worst, std::abs(viewer.framebuffer()[i] - bgrx[i]));
    }
    return worst;
}

using test::eventually;

inline std::size_t count_entries(const char* directory) {
    std::size_t count = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(directory))
        ++count;
    return count;
}

inline VncServer::Options server_options() {
    VncServer::Options options;
    options.password = kPassword;
    options.view_only_password = kViewPassword;
    options.desktop_name = "sandbox-test";
    return options;
}

inline TestViewer::Options viewer_options(const VncServer& server,
                                          std::string password = kPassword) {
    TestViewer::Options options;
    options.port = server.port();
    options.password = std::move(password);
    return options;
}

// What the InputHandler saw, filled from the server's thread.
struct InputLog {
    std::mutex mutex;
    std::vector<std::tuple<int, int, int>> pointer;
    std::vector<std::pair<std::uint32_t, bool>> keys;
    std::vector<std::string> cut_text;

    VncServer::InputHandler handler() {
        return {[this](int x, int y, int mask) {
                    std::lock_guard lock(mutex);
                    pointer.emplace_back(x, y, mask);
                },
                [this](std::uint32_t keysym, bool down) {
                    std::lock_guard lock(mutex);
                    keys.emplace_back(keysym, down);
                },
                [this](std::string text) {
                    std::lock_guard lock(mutex);
                    cut_text.push_back(std::move(text));
                }};
    }
    std::size_t total() {
        std::lock_guard lock(mutex);
        return pointer.size() + keys.size() + cut_text.size();
    }
};

}  // namespace deskbox::streaming::vnc_test
