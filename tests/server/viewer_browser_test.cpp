// The web viewer in a real headless Chromium, driven over the DevTools protocol: the page shows
// the sandbox's desktop, a click in the page with a control token reaches a window in the
// sandbox, and with a view token it does not. The dashboard lists the sandbox.
#include <cstdlib>

#include <gtest/gtest.h>

#include <boost/beast/core/detail/base64.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <iostream>
#include <regex>

#include "tests/server/chromium.hpp"
#include "tests/server/deskboxd_fixture.hpp"
#include "tests/server/ws_client.hpp"

namespace deskbox {
namespace {

using namespace test;

struct CanvasRect {
    double left = 0, top = 0, width = 0, height = 0;
};

CanvasRect canvas_rect(DevTools& dt) {
    json r = dt.evaluate(
        "(() => { const r = document.getElementById('screen').getBoundingClientRect();"
        " return {left: r.left, top: r.top, width: r.width, height: r.height}; })()");
    return {r["left"], r["top"], r["width"], r["height"]};
}

class ViewerBrowserTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!template_built())
            GTEST_SKIP() << "template 'minimal' not built: run images/build.py minimal";
        if (!have_chromium()) GTEST_SKIP() << "chromium is not installed";
        server_ = std::make_unique<Server>();
        auto a =
            server_->post("/v1/sandboxes", {{"template", "minimal"}, {"resolution", {800, 600}}});
        ASSERT_EQ(a.status, 201u) << a.body;
        sandbox_ = a.js();
        id_ = sandbox_["id"];
        // A window that records clicks: xterm with mouse reporting on, its input copied to a file.
        start(*server_, id_,
              "xterm -T clickcatcher -geometry 30x6+420+330 -e sh -c "
              "'stty raw -echo; printf \"\\033[?1000h\"; exec cat -v > /tmp/clicks'");
        ASSERT_TRUE(eventually([&] { return find_window("clickcatcher").is_object(); }))
            << server_->get("/v1/sandboxes/" + id_ + "/windows").body
            << run(*server_, id_, "ps -ef");
        // The file appears when cat starts, after mouse reporting was switched on: a click
        // before that goes to xterm itself (a selection) and is never recorded.
        ASSERT_TRUE(eventually(
            [&] { return run(*server_, id_, "test -e /tmp/clicks && echo ready") == "ready\n"; }));
        std::this_thread::sleep_for(200ms);  // xterm reads the escape from its pty a moment later
    }

    json find_window(const std::string& title) {
        json windows =
            server_->get("/v1/sandboxes/" + id_ + "/windows").js();  // kept alive for the loop
        for (auto& w : windows["windows"])
            if (w.value("title", "") == title) return w;
        return nullptr;
    }

    // The page's canvas, scaled back to the 800x600 screen, against the API's screenshot.
    // With DESKBOX_KEEP_SCREENSHOTS set, the page is saved to the test temp dir for a person
    // to look at (a test run leaves no files otherwise).
    double canvas_psnr(DevTools& dt) {
        CanvasRect r = canvas_rect(dt);
        cv::Mat page_shot = dt.screenshot();
        if (page_shot.empty()) return 0;
        if (std::getenv("DESKBOX_KEEP_SCREENSHOTS"))
            cv::imwrite(::testing::TempDir() + "deskbox_viewer_page.png", page_shot);
        cv::Rect roi(static_cast<int>(r.left + 0.5), static_cast<int>(r.top + 0.5),
                     static_cast<int>(r.width), static_cast<int>(r.height));
        roi &= cv::Rect(0, 0, page_shot.cols, page_shot.rows);
        if (roi.area() <= 0) return 0;
        cv::Mat shown;
        cv::resize(page_shot(roi), shown, cv::Size(800, 600), 0, 0, cv::INTER_AREA);
        auto shot = server_->get("/v1/sandboxes/" + id_ + "/screenshot?format=png");
        cv::Mat truth =
            cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_COLOR);
        return cv::PSNR(shown, truth);
    }

    struct Viewer {
        std::unique_ptr<Browser> browser;
        std::unique_ptr<WsClient> page;
        std::unique_ptr<DevTools> dt;
    };

    // Opens the viewer with `token`, waits for a drawn frame, clicks the catcher's centre.
    Viewer open_and_click(const std::string& token) {
        Viewer v;
        std::string url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/view/" + id_ +
                          "?token=" + token + "&control=1&codec=jpeg";
        v.browser = std::make_unique<Browser>(url);
        v.page = v.browser->page();
        if (!v.page || !v.page->connected()) {
            ADD_FAILURE() << "no DevTools page";
            return v;
        }
        v.dt = std::make_unique<DevTools>(*v.page);
        DevTools& dt = *v.dt;
        EXPECT_TRUE(eventually(
            [&] {
                json drawn =
                    dt.evaluate("window.deskboxViewer ? window.deskboxViewer.framesDrawn : 0");
                return drawn.is_number() && drawn.get<int>() > 0;
            },
            60s))
            << dt.evaluate("JSON.stringify(window.deskboxViewer)").dump();
        json w = find_window("clickcatcher");
        CanvasRect r = canvas_rect(dt);
        double sx = r.width / 800.0, sy = r.height / 600.0;
        double cx = w["x"].get<int>() + w["width"].get<int>() / 2.0;
        double cy = w["y"].get<int>() + w["height"].get<int>() / 2.0;
        dt.click(r.left + cx * sx, r.top + cy * sy);
        return v;
    }

    std::unique_ptr<Server> server_;
    json sandbox_;
    std::string id_;
};

TEST_F(ViewerBrowserTest, ThePageShowsTheDesktopAndAControlClickReachesTheSandbox) {
    Viewer viewer = open_and_click(sandbox_["control_token"]);
    ASSERT_TRUE(viewer.dt);
    DevTools* dt = viewer.dt.get();
    EXPECT_TRUE(eventually([&] {
        return run(*server_, id_, "cat /tmp/clicks").find("^[[M") != std::string::npos;
    })) << "the click did not reach the xterm; viewer: "
        << dt->evaluate("JSON.stringify(window.deskboxViewer)").dump();

    // What the page shows in its canvas is the sandbox's screen.
    EXPECT_GT(canvas_psnr(*dt), 18.0) << "the page does not show the sandbox's screen";
    EXPECT_EQ(dt->evaluate("window.deskboxViewer.control"), true);
}

TEST_F(ViewerBrowserTest, AViewTokenPageCannotClick) {
    Viewer viewer = open_and_click(sandbox_["view_token"]);
    ASSERT_TRUE(viewer.dt);
    DevTools* dt = viewer.dt.get();
    EXPECT_EQ(dt->evaluate("window.deskboxViewer.control"), false);
    EXPECT_EQ(dt->evaluate("document.getElementById('control').disabled"), true);
    std::this_thread::sleep_for(2s);  // give a wrongly forwarded click time to arrive
    EXPECT_EQ(run(*server_, id_, "cat /tmp/clicks"), "");
}

// Left to choose, the page takes H.264 through WebCodecs where the browser can decode it (else
// JPEG), and either way it draws frames.
TEST_F(ViewerBrowserTest, TheDefaultCodecDrawsFrames) {
    std::string url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/view/" + id_ +
                      "?token=" + sandbox_["view_token"].get<std::string>();
    Browser browser(url);
    auto socket = browser.page();
    ASSERT_TRUE(socket && socket->connected());
    DevTools dt(*socket);
    EXPECT_TRUE(eventually(
        [&] {
            json drawn = dt.evaluate("window.deskboxViewer ? window.deskboxViewer.framesDrawn : 0");
            return drawn.is_number() && drawn.get<int>() > 0;
        },
        60s))
        << dt.evaluate("JSON.stringify(window.deskboxViewer)").dump();
    std::cout << "viewer state: " << dt.evaluate("JSON.stringify(window.deskboxViewer)").dump()
              << "\n";
    // What the canvas shows is the sandbox's screen, whichever codec drew it (the decoder's
    // output lands a moment after the packet).
    EXPECT_TRUE(eventually([&] { return canvas_psnr(dt) > 18.0; }, 10s))
        << "the page does not show the sandbox's screen (PSNR " << canvas_psnr(dt) << ")";
}

// noVNC (the Debian package's vnc_lite.html, served from its own origin) connects through
// deskboxd's RFB-over-WebSocket endpoint with the sandbox's token and VNC password.
TEST_F(ViewerBrowserTest, NoVncConnectsThroughDeskboxd) {
    if (!std::filesystem::exists("/usr/share/novnc/vnc_lite.html"))
        GTEST_SKIP() << "novnc is not installed";
    SpawnOptions o;
    o.argv = {"python3", "-u",        "-m",          "http.server",     "0",
              "--bind",  "127.0.0.1", "--directory", "/usr/share/novnc"};
    o.pipe_stdout = true;
    o.stderr_to_null = true;
    ChildProcess files = ChildProcess::spawn(o);
    std::string line;
    char c;
    while (::read(files.stdout_fd().get(), &c, 1) == 1 && c != '\n') line += c;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, std::regex("port (\\d+)"))) << line;
    json vnc = server_->get("/v1/sandboxes/" + id_).js()["vnc"];
    std::string path =
        "v1/sandboxes/" + id_ + "/vnc?token=" + sandbox_["control_token"].get<std::string>();
    std::string encoded;
    for (unsigned char ch : path) {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", ch);
        encoded += std::isalnum(ch) ? std::string(1, static_cast<char>(ch)) : std::string(hex);
    }
    std::string url = "http://127.0.0.1:" + std::string(m[1]) +
                      "/vnc_lite.html?host=127.0.0.1&port=" + std::to_string(server_->port()) +
                      "&path=" + encoded + "&password=" + vnc["password"].get<std::string>();
    Browser browser(url);
    auto socket = browser.page();
    ASSERT_TRUE(socket && socket->connected());
    DevTools dt(*socket);
    EXPECT_TRUE(eventually(
        [&] {
            json status = dt.evaluate("document.getElementById('status').textContent");
            return status.is_string() &&
                   status.get<std::string>().rfind("Connected to deskbox", 0) == 0;
        },
        60s))
        << dt.evaluate("document.getElementById('status').textContent").dump();
    // The canvas shows the desktop: not one flat colour.
    const std::string count_colours =
        "(() => { const c = document.querySelector('#screen canvas'); const d = c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data; const seen = new Set();"
        " for (let i = 0; i < d.length; i += 4 * 97) seen.add(d[i] << 16 | d[i+1] << 8 | d[i+2]);"
        " return seen.size; })()";
    json distinct;
    EXPECT_TRUE(eventually(
        [&] {
            distinct = dt.evaluate(count_colours);
            return distinct.is_number() && distinct.get<int>() > 3;
        },
        30s))
        << distinct.dump();
}

TEST_F(ViewerBrowserTest, TheDashboardListsTheSandbox) {
    auto page = server_->get("/");
    EXPECT_EQ(page.status, 200u);
    EXPECT_NE(page.body.find("dashboard.js"), std::string::npos);
    std::string url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/";
    Browser browser(url);
    auto socket = browser.page();
    ASSERT_TRUE(socket && socket->connected());
    DevTools dt(*socket);
    EXPECT_TRUE(eventually(
        [&] {
            json text = dt.evaluate("document.getElementById('sandboxes').innerText");
            return text.is_string() && text.get<std::string>().find(id_) != std::string::npos;
        },
        30s));
    // Once the usage sampler has seen it: its CPU and memory, and today's totals above.
    json row;
    EXPECT_TRUE(eventually(
        [&] {
            row = dt.evaluate("document.getElementById('sandboxes').innerText");
            const std::string text = row.is_string() ? row.get<std::string>() : "";
            return text.find(" %") != std::string::npos && text.find(" MiB") != std::string::npos;
        },
        30s))
        << row.dump();
    json today;
    EXPECT_TRUE(eventually(
        [&] {
            today = dt.evaluate("document.getElementById('today').innerText");
            return today.is_string() &&
                   today.get<std::string>().find("vCPU-s") != std::string::npos;
        },
        30s))
        << today.dump();
}

// Each running sandbox's thumbnail draws: the image decoded (naturalWidth) and shows the
// desktop (more than a few colours in its pixels), with no screenshot refused on the way.
TEST_F(ViewerBrowserTest, TheDashboardThumbnailsDraw) {
    std::string url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/";
    Browser browser(url);
    auto socket = browser.page();
    ASSERT_TRUE(socket && socket->connected());
    DevTools dt(*socket);
    const std::string thumbnail = "document.querySelector('#sandboxes tbody img')";
    json state;
    EXPECT_TRUE(eventually(
        [&] {
            // Before the page's script has run there is no window.deskboxDashboard yet.
            state = dt.evaluate(
                "window.deskboxDashboard ? {drawn: window.deskboxDashboard.thumbnailsDrawn,"
                " error: window.deskboxDashboard.lastThumbnailError, width: " +
                thumbnail + " ? " + thumbnail + ".naturalWidth : 0} : null");
            return state.is_object() && state["drawn"].get<int>() > 0 &&
                   state["width"].get<int>() > 0;
        },
        30s))
        << state.dump();
    EXPECT_EQ(dt.evaluate(thumbnail + ".naturalWidth"), 240);  // the width the dashboard asks
    const std::string count_colours =
        "(() => { const img = " + thumbnail +
        "; const c = document.createElement('canvas'); c.width = img.naturalWidth;"
        " c.height = img.naturalHeight; const g = c.getContext('2d'); g.drawImage(img, 0, 0);"
        " const d = g.getImageData(0, 0, c.width, c.height).data; const seen = new Set();"
        " for (let i = 0; i < d.length; i += 4 * 7) seen.add(d[i] << 16 | d[i+1] << 8 | d[i+2]);"
        " return seen.size; })()";
    json distinct = dt.evaluate(count_colours);
    EXPECT_TRUE(distinct.is_number() && distinct.get<int>() > 3) << distinct.dump();
    EXPECT_EQ(dt.evaluate("window.deskboxDashboard.thumbnailErrors"), 0)
        << dt.evaluate("window.deskboxDashboard.lastThumbnailError").dump();
    // It keeps refreshing (every 2 s) without the cache-buster the route would refuse.
    const int drawn = dt.evaluate("window.deskboxDashboard.thumbnailsDrawn").get<int>();
    EXPECT_TRUE(eventually(
        [&] { return dt.evaluate("window.deskboxDashboard.thumbnailsDrawn").get<int>() > drawn; },
        30s));
    EXPECT_EQ(dt.evaluate("window.deskboxDashboard.thumbnailErrors"), 0)
        << dt.evaluate("window.deskboxDashboard.lastThumbnailError").dump();
}

}  // namespace
}  // namespace deskbox
