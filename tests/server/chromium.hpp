// Headless Chromium for tests, driven over the DevTools protocol: a real browser opening
// deskboxd's pages (the viewer, exposed ports) and reporting what it shows.
#pragma once

#include <unistd.h>

#include <boost/beast/core/detail/base64.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/server/deskboxd_fixture.hpp"
#include "tests/server/ws_client.hpp"

namespace deskbox::test {

inline bool have_chromium() {
    return run_process({"sh", "-c", "command -v chromium"}).status.exit_code == 0;
}

// Headless Chromium with DevTools on a free port, one page; killed with its process group.
class Browser {
  public:
    // `flags`: more command-line switches (e.g. --host-resolver-rules for a test's names).
    explicit Browser(const std::string& url, const std::vector<std::string>& flags = {}) {
        SpawnOptions o;
        o.argv = {"chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
                  "--remote-debugging-port=0",
                  "--user-data-dir=" + (dir_.path() / "profile").string(), "--window-size=1024,768",
                  "--no-first-run",
                  // This machine's network is closed: no update, sync or field-trial traffic.
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--mute-audio"};
        o.argv.insert(o.argv.end(), flags.begin(), flags.end());
        o.argv.push_back(url);
        o.pipe_stderr = true;
        o.new_process_group = true;
        process_ = ChildProcess::spawn(o);
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
        std::string text;
        char c;
        std::smatch m;
        const std::regex listening("DevTools listening on ws://127\\.0\\.0\\.1:(\\d+)/");
        while (::read(process_.stderr_fd().get(), &c, 1) == 1) {
            text += c;
            if (c == '\n' && std::regex_search(text, m, listening)) break;
        }
        if (!std::regex_search(text, m, listening))
            throw std::runtime_error("chromium did not start: " + text);
        port_ = std::stoi(m[1]);
    }
    ~Browser() { process_.terminate(std::chrono::seconds(10)); }

    // The page's DevTools socket (the first "page" target).
    std::unique_ptr<WsClient> page() {
        for (int attempt = 0; attempt < 100; ++attempt) {
            auto list = http_get("/json/list");
            json targets = json::parse(list, nullptr, false);
            if (targets.is_array())
                for (auto& t : targets)
                    if (t.value("type", "") == "page") {
                        std::string ws = t["webSocketDebuggerUrl"];
                        auto path = ws.substr(ws.find("/devtools/"));
                        return std::make_unique<WsClient>(port_, path);
                    }
            std::this_thread::sleep_for(100ms);
        }
        return nullptr;
    }

  private:
    std::string http_get(const std::string& target) {
        net::io_context io;
        beast::tcp_stream stream(io);
        stream.connect(
            tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)));
        http::request<http::string_body> req{http::verb::get, target, 11};
        req.set(http::field::host, "127.0.0.1");
        http::write(stream, req);
        beast::flat_buffer buffer;
        http::response<http::string_body> res;
        http::read(stream, buffer, res);
        return res.body();
    }

    TempDir dir_{"deskbox-chromium"};
    ChildProcess process_;
    int port_ = 0;
};

// DevTools commands over the page socket.
class DevTools {
  public:
    explicit DevTools(WsClient& ws) : ws_(ws) {}
    json call(const std::string& method, json params = json::object()) {
        int id = ++next_id_;
        ws_.send_text(json{{"id", id}, {"method", method}, {"params", params}}.dump());
        auto reply = ws_.read_until(
            [&](const WsClient::Message& m) { return m.json().value("id", 0) == id; }, 30s);
        if (!reply) throw std::runtime_error("no DevTools answer to " + method);
        json j = reply->json();
        if (j.contains("error")) throw std::runtime_error(method + ": " + j["error"].dump());
        return j["result"];
    }
    json evaluate(const std::string& expression) {
        return call("Runtime.evaluate",
                    {{"expression", expression}, {"returnByValue", true}})["result"]["value"];
    }
    void click(double x, double y) {
        call("Input.dispatchMouseEvent", {{"type", "mouseMoved"}, {"x", x}, {"y", y}});
        call("Input.dispatchMouseEvent", {{"type", "mousePressed"},
                                          {"x", x},
                                          {"y", y},
                                          {"button", "left"},
                                          {"buttons", 1},
                                          {"clickCount", 1}});
        call("Input.dispatchMouseEvent", {{"type", "mouseReleased"},
                                          {"x", x},
                                          {"y", y},
                                          {"button", "left"},
                                          {"buttons", 0},
                                          {"clickCount", 1}});
    }
    cv::Mat screenshot() {
        std::string b64 = call("Page.captureScreenshot", {{"format", "png"}})["data"];
        std::string bytes(beast::detail::base64::decoded_size(b64.size()), '\0');
        auto [written, read] = beast::detail::base64::decode(bytes.data(), b64.data(), b64.size());
        bytes.resize(written);
        return cv::imdecode(std::vector<uchar>(bytes.begin(), bytes.end()), cv::IMREAD_COLOR);
    }

  private:
    WsClient& ws_;
    int next_id_ = 0;
};

}  // namespace deskbox::test
