// A real deskboxd for tests: started on a free loopback port with a state dir of its own,
// driven over HTTP like a client, stopped at the end. Plus the helpers sandbox tests share.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "tests/support/deskboxd_process.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox {
namespace test {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;
using namespace std::chrono_literals;

struct Answer {
    unsigned status = 0;
    std::string body;
    std::map<std::string, std::string> headers;
    json js() const { return json::parse(body, nullptr, false); }
};

class Server {
  public:
    // `state_dir` empty: a fresh one of its own; else that one (a restarted server).
    // `max_open_files` nonzero: deskboxd's RLIMIT_NOFILE.
    explicit Server(std::vector<std::string> extra = {}, std::filesystem::path state_dir = {},
                    unsigned long max_open_files = 0)
        : state_(state_dir.empty() ? dir_.path() / "state" : std::move(state_dir)) {
        try {
            process_.emplace(deskbox::test_paths::kDeskboxd, state_, dir_.path() / "deskboxd.log",
                             extra, max_open_files);
            port_ = process_->port();
        } catch (const std::exception& e) {
            ADD_FAILURE() << e.what();
        }
    }
    void kill_hard() {
        if (process_) process_->kill_hard();
    }
    std::string log() const {
        std::ifstream in(dir_.path() / "deskboxd.log");
        return std::string((std::istreambuf_iterator<char>(in)), {});
    }
    std::filesystem::path state() const { return state_; }
    pid_t pid() const { return process_ ? process_->pid() : -1; }
    int port() const { return port_; }

    Answer call(http::verb method, const std::string& target, const std::string& body = {},
                std::map<std::string, std::string> headers = {}) {
        net::io_context io;
        beast::tcp_stream stream(io);
        stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
        http::request<http::string_body> req{method, target, 11};
        req.set(http::field::host, "127.0.0.1");
        for (auto& [k, v] : headers) req.set(k, v);
        if (!body.empty() || method == http::verb::post || method == http::verb::put) {
            req.body() = body;
            req.prepare_payload();
        }
        // A server refusing a huge body may answer and close before reading it all: a failed
        // write still leaves its answer to read.
        beast::error_code write_ec;
        http::write(stream, req, write_ec);
        beast::flat_buffer buffer;
        http::response_parser<http::string_body> parser;
        parser.body_limit(256 << 20);
        beast::error_code ec;
        http::read(stream, buffer, parser, ec);
        Answer a;
        if (ec) return a;
        auto res = parser.release();
        a.status = res.result_int();
        a.body = res.body();
        for (auto& f : res) a.headers[std::string(f.name_string())] = std::string(f.value());
        record(req, a);
        return a;
    }
    Answer post(const std::string& target, const json& body) {
        return call(http::verb::post, target, body.dump());
    }
    Answer patch(const std::string& target, const json& body) {
        return call(http::verb::patch, target, body.dump());
    }
    Answer get(const std::string& target) { return call(http::verb::get, target); }
    Answer del(const std::string& target) { return call(http::verb::delete_, target); }

  private:
#ifdef DESKBOX_RECORD_API_EXCHANGES
    // Every exchange, as a JSON line, for tests/api/openapi_validate.py to check against
    // server/api/openapi.json. One write(2) per line on an O_APPEND fd: test processes running
    // side by side do not interleave lines.
    static void record(const http::request<http::string_body>& req, const Answer& a) {
        auto parsed = [](const std::string& text, const std::string& type) {
            if (type.rfind("application/json", 0) != 0 || text.size() > (1u << 20)) return json();
            return json::parse(text, nullptr, false).is_discarded() ? json() : json::parse(text);
        };
        std::string request_type(req[http::field::content_type]);
        if (request_type.empty() && !req.body().empty()) request_type = "application/json";
        auto type = a.headers.count("Content-Type") ? a.headers.at("Content-Type") : "";
        json line = {{"method", std::string(req.method_string())},
                     {"target", std::string(req.target())},
                     {"request_content_type", request_type},
                     {"request_body", parsed(req.body(), request_type)},
                     {"status", a.status},
                     {"content_type", type},
                     {"body", parsed(a.body, type)}};
        std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        int fd = ::open(deskbox::test_paths::kApiRecordFile,
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) return;
        [[maybe_unused]] auto written = ::write(fd, text.data(), text.size());
        ::close(fd);
    }
#else
    static void record(const http::request<http::string_body>&, const Answer&) {}
#endif
    TempDir dir_{"deskboxd-test"};
    std::filesystem::path state_;
    std::optional<DeskboxdProcess> process_;
    int port_ = 0;
};

inline bool template_built(const std::string& name = "minimal") {
    auto r = run_process(
        {"python3", deskbox::test_paths::source("images/build.py"), "--print-path", name});
    std::string path = r.out;
    while (!path.empty() && path.back() == '\n') path.pop_back();
    return r.status.exit_code == 0 && std::filesystem::exists(path + "/usr/bin/Xvfb");
}

#define REQUIRE_TEMPLATE() \
    if (!template_built()) \
    GTEST_SKIP() << "template 'minimal' not built: run images/build.py minimal"

using test::eventually;

// An initialised MCP session on /mcp: the headers its next requests carry (Mcp-Session-Id).
inline std::map<std::string, std::string> open_mcp_session(Server& s, const std::string& client) {
    const json init = {{"jsonrpc", "2.0"},
                       {"id", 1},
                       {"method", "initialize"},
                       {"params",
                        {{"protocolVersion", "2025-06-18"},
                         {"capabilities", json::object()},
                         {"clientInfo", {{"name", client}, {"version", "1"}}}}}};
    std::map<std::string, std::string> headers = {
        {"Content-Type", "application/json"}, {"Accept", "application/json, text/event-stream"}};
    const Answer opened = s.call(http::verb::post, "/mcp", init.dump(), headers);
    EXPECT_EQ(opened.status, 200u) << opened.body;
    if (opened.headers.count("Mcp-Session-Id"))
        headers["Mcp-Session-Id"] = opened.headers.at("Mcp-Session-Id");
    return headers;
}

// Opens `url` in the sandbox's open Firefox as an agent would, through the address bar: ctrl+l,
// then the URL typed once the address bar has the focus (Firefox moves it there a moment after
// the key, longer on a busy machine; keys typed before would go to the page). The accessibility
// tree says when: Firefox's address bar is a focused combo box.
inline void open_in_firefox(Server& s, const std::string& id, const std::string& url) {
    const std::string base = "/v1/sandboxes/" + id;
    auto pressed = s.post(base + "/actions", {{"type", "key"}, {"keys", "ctrl+l"}});
    EXPECT_EQ(pressed.status, 200u) << pressed.body;
    const json address_bar = {{"role", "combo box"},
                              {"name", "Search or enter address"},
                              {"states", {"focused"}},
                              {"app", "firefox"}};
    EXPECT_TRUE(eventually(
        [&] {
            auto found = s.post(base + "/accessibility/find", address_bar);
            return found.status == 200u && !found.js().value("matches", json::array()).empty();
        },
        30s))
        << "Firefox's address bar never took the focus";
    auto typed = s.post(base + "/actions", {{"type", "type"}, {"text", url + "\n"}});
    EXPECT_EQ(typed.status, 200u) << typed.body;
}

// Starts a command in the background (it outlives the request, like a launched app).
inline void start(Server& s, const std::string& id, const std::string& cmd) {
    auto a = s.post("/v1/sandboxes/" + id + "/commands", {{"cmd", cmd}, {"background", true}});
    EXPECT_EQ(a.status, 200u) << a.body;
}

inline std::string run(Server& s, const std::string& id, const std::string& cmd) {
    auto a = s.post("/v1/sandboxes/" + id + "/commands", {{"cmd", cmd}});
    EXPECT_EQ(a.status, 200u) << a.body;
    return a.js().value("stdout", "");
}

// Durability cycles: writes cycle `n`'s two files in the sandbox's home (one fsync'd, one left
// in the page cache) and answers the checksums of every such file so far, which a pause, a
// save or a wake must bring back unchanged (compare with cycle_sums()).
inline std::string cycle_sums(Server& s, const std::string& id) {
    return run(s, id, "cd /home/user && sha256sum synced* cached*");
}
inline std::string write_cycle_files(Server& s, const std::string& id, int n) {
    const std::string i = std::to_string(n);
    run(s, id,
        "head -c 50000 /dev/urandom > /home/user/synced" + i + " && sync /home/user/synced" + i +
            " && head -c 50000 /dev/urandom > /home/user/cached" + i);
    return cycle_sums(s, id);
}

}  // namespace test
}  // namespace deskbox
