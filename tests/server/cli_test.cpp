// The `deskbox` CLI and its ApiClient, run as a real process against a small fake deskboxd
// written here with Beast: the code under test is the client, so the server only records what
// it receives and answers as scripted. (The end-to-end test against the real deskboxd lives
// with the server.)
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
// GCC 12 at -O1 with sanitizers warns falsely about boost::optional inside Beast's request
// parser (content_length); the headers are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#pragma GCC diagnostic pop
#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using nlohmann::json;
using namespace std::chrono_literals;

const std::string kDeskbox = deskbox::test_paths::kDeskboxCli;

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// An independent decoder, so the test does not trust the client's encoder.
std::string percent_decode(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
            hex_value(text[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
            i += 2;
        } else {
            out += text[i];
        }
    }
    return out;
}

struct RecordedRequest {
    std::string method;
    std::string target;                          // as sent
    std::string path;                            // before '?'
    std::map<std::string, std::string> query;    // decoded
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
    int connection = 0;  // 1-based number of the TCP connection it came on

    json json_body() const { return json::parse(body); }
    std::string header(const std::string& name) const {
        auto it = headers.find(name);
        return it == headers.end() ? "<none>" : it->second;
    }
    std::string line() const { return method + " " + path; }
};

struct FakeAnswer {
    unsigned status = 200;  // 0: close the connection without answering
    std::string body = "{}";
    std::string content_type = "application/json";
    std::vector<std::pair<std::string, std::string>> headers;
    bool close = false;       // answer with "Connection: close" and close
    bool drop_after = false;  // keep-alive answer, then close anyway (an idle timeout)
};

FakeAnswer json_answer(const json& body, unsigned status = 200) {
    return FakeAnswer{status, body.dump(), "application/json", {}, false, false};
}

FakeAnswer raw_answer(unsigned status, std::string body, std::string content_type,
                      std::vector<std::pair<std::string, std::string>> headers = {}) {
    return FakeAnswer{status, std::move(body), std::move(content_type), std::move(headers), false,
                      false};
}

FakeAnswer error_answer(unsigned status, const std::string& code, const std::string& message,
                        const std::string& field = {}) {
    json error = {{"code", code}, {"message", message}};
    if (!field.empty()) error["field"] = field;
    return json_answer(json{{"error", error}}, status);
}

// A scripted HTTP/1.1 server on 127.0.0.1 with one I/O thread; records every request.
class FakeServer {
  public:
    using Handler = std::function<FakeAnswer(const RecordedRequest&)>;

    FakeServer() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
        accept();
        thread_ = std::thread([this] { io_.run(); });
    }
    ~FakeServer() {
        io_.stop();
        thread_.join();
    }
    FakeServer(const FakeServer&) = delete;
    FakeServer& operator=(const FakeServer&) = delete;

    std::string url() const {
        return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
    }
    void set_handler(Handler handler) {
        std::lock_guard lock(mutex_);
        handler_ = std::move(handler);
    }
    std::vector<RecordedRequest> requests() const {
        std::lock_guard lock(mutex_);
        return requests_;
    }
    int connections() const {
        std::lock_guard lock(mutex_);
        return connections_;
    }

  private:
    struct Session : std::enable_shared_from_this<Session> {
        Session(FakeServer& server, tcp::socket socket, int number)
            : server(server), socket(std::move(socket)), number(number) {}
        FakeServer& server;
        tcp::socket socket;
        int number;
        beast::flat_buffer buffer;
        std::optional<http::request_parser<http::string_body>> parser;
        http::response<http::string_body> response;
        bool drop = false;

        void read() {
            parser.emplace();
            parser->body_limit(64 << 20);
            http::async_read(socket, buffer, *parser,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                 if (!ec) self->answer();
                             });
        }
        void answer() {
            auto request = parser->release();
            RecordedRequest recorded;
            recorded.method = std::string(request.method_string());
            recorded.target = std::string(request.target());
            auto question = recorded.target.find('?');
            recorded.path = recorded.target.substr(0, question);
            if (question != std::string::npos) {
                std::stringstream pairs(recorded.target.substr(question + 1));
                std::string pair;
                while (std::getline(pairs, pair, '&')) {
                    auto eq = pair.find('=');
                    recorded.query[percent_decode(pair.substr(0, eq))] =
                        eq == std::string::npos ? "" : percent_decode(pair.substr(eq + 1));
                }
            }
            for (const auto& field : request) {
                std::string name(field.name_string());
                for (auto& c : name)
                    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                recorded.headers[name] = std::string(field.value());
            }
            recorded.body = request.body();
            recorded.connection = number;
            FakeAnswer scripted;
            {
                std::lock_guard lock(server.mutex_);
                server.requests_.push_back(recorded);
                if (server.handler_) scripted = server.handler_(recorded);
            }
            if (scripted.status == 0) {
                beast::error_code ignored;
                socket.shutdown(tcp::socket::shutdown_both, ignored);
                socket.close(ignored);
                return;
            }
            response = {static_cast<http::status>(scripted.status), 11};
            response.set(http::field::content_type, scripted.content_type);
            for (const auto& [name, value] : scripted.headers) response.set(name, value);
            response.body() = scripted.body;
            response.keep_alive(request.keep_alive() && !scripted.close);
            response.prepare_payload();
            drop = scripted.drop_after || !response.keep_alive();
            http::async_write(socket, response,
                              [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                  if (ec) return;
                                  if (self->drop) {
                                      beast::error_code ignored;
                                      self->socket.shutdown(tcp::socket::shutdown_both, ignored);
                                      self->socket.close(ignored);
                                      return;
                                  }
                                  self->read();
                              });
        }
    };

    void accept() {
        acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
            if (ec) return;
            int number;
            {
                std::lock_guard lock(mutex_);
                number = ++connections_;
            }
            std::make_shared<Session>(*this, std::move(socket), number)->read();
            accept();
        });
    }

    asio::io_context io_;
    tcp::acceptor acceptor_;
    std::thread thread_;
    mutable std::mutex mutex_;
    Handler handler_;
    std::vector<RecordedRequest> requests_;
    int connections_ = 0;
};

// Runs the real `deskbox` binary with a clean environment for its own variables.
RunResult run_deskbox(const std::vector<std::string>& args, const std::string& stdin_data = "",
                      const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {"/usr/bin/env", "-u", "DESKBOX_SERVER", "-u",
                                     "DESKBOX_API_KEY"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back(kDeskbox);
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult result = run_process(argv, 60s, stdin_data);
    EXPECT_FALSE(result.timed_out);
    return result;
}

std::string read_file(const fs::path& path) {
    std::ifstream file(path, std::ios::binary);
    std::ostringstream bytes;
    bytes << file.rdbuf();
    return bytes.str();
}

void write_file(const fs::path& path, const std::string& bytes) {
    std::ofstream file(path, std::ios::binary);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Every byte value, then pseudo-random bytes: CR/LF, NUL and invalid UTF-8 included.
std::string binary_blob(std::size_t size) {
    std::string bytes;
    for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
    std::mt19937 random(42);
    while (bytes.size() < size) bytes += static_cast<char>(random() & 0xff);
    return bytes;
}

class CliTest : public ::testing::Test {
  protected:
    RunResult run(std::vector<std::string> args, const std::string& stdin_data = "") {
        args.insert(args.begin(), {"--server", server.url()});
        return run_deskbox(args, stdin_data);
    }
    RecordedRequest only_request() {
        auto requests = server.requests();
        EXPECT_EQ(requests.size(), 1u);
        return requests.empty() ? RecordedRequest{} : requests.front();
    }

    FakeServer server;
    TempDir temp{"deskbox-cli-test"};
};

// --- sandboxes -----------------------------------------------------------------------------

TEST_F(CliTest, CreateSendsTheDefaultsAndPrintsTheId) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"id", "sb-123"}, {"state", "running"}}, 201);
    });
    RunResult result = run({"create"});
    EXPECT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(result.out, "sb-123\n");
    RecordedRequest request = only_request();
    EXPECT_EQ(request.line(), "POST /v1/sandboxes");
    EXPECT_EQ(request.header("content-type"), "application/json");
    EXPECT_EQ(request.header("authorization"), "<none>");
    // No --runtime: none sent, so the server's --default-runtime decides.
    EXPECT_EQ(request.json_body(),
              json({{"template", "minimal"}, {"resolution", {1280, 800}}, {"timeout_s", 300}}));
}

TEST_F(CliTest, CreateWithEveryOptionAndJsonOutput) {
    json answer = {{"id", "sb-9"}, {"state", "running"}, {"view_token", "v"}};
    server.set_handler([&](const RecordedRequest&) { return json_answer(answer, 201); });
    RunResult result = run(
        {"--api-key",  "secret-key", "create",       "--template", "desktop",  "--runtime=microvm",
         "--size",     "1920x1080",  "--timeout",    "60",         "--dpi",    "120",
         "--api-size", "1024x768",   "--on-timeout", "pause",      "--memory", "2048",
         "--cpus",     "1.5",        "--pids",       "500",        "--env",    "LANG=pt_BR.UTF-8",
         "--env",      "A=b=c",      "--meta",       "owner=ci",   "--disk",   "4096",
         "--json"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(json::parse(result.out), answer);
    RecordedRequest request = only_request();
    EXPECT_EQ(request.header("authorization"), "Bearer secret-key");
    EXPECT_EQ(
        request.json_body(),
        json({{"template", "desktop"},
              {"runtime", "microvm"},
              {"resolution", {1920, 1080}},
              {"timeout_s", 60},
              {"dpi", 120},
              {"api_resolution", {1024, 768}},
              {"on_timeout", "pause"},
              {"limits", {{"memory_mb", 2048}, {"cpus", 1.5}, {"pids", 500}, {"disk_mb", 4096}}},
              {"env", {{"LANG", "pt_BR.UTF-8"}, {"A", "b=c"}}},
              {"metadata", {{"owner", "ci"}}}}));
}

TEST_F(CliTest, CreateTakesANetworkPolicy) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"id", "sb-n"}, {"state", "running"}}, 201);
    });
    RunResult result =
        run({"create", "--allow", "example.org", "--allow", "*.cdn.example", "--allow",
             "10.1.0.0/16", "--deny", "ads.example.org", "--egress-kbps", "800"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    json body = only_request().json_body();
    EXPECT_EQ(body["network"], json({{"allow", {"example.org", "*.cdn.example", "10.1.0.0/16"}},
                                     {"deny", {"ads.example.org"}}}));
    EXPECT_EQ(body["limits"], json({{"egress_kbps", 800}}));
    ASSERT_EQ(run({"create", "--network", "off"}).status.exit_code, 0);
    EXPECT_EQ(server.requests().back().json_body()["network"], false);
    ASSERT_EQ(run({"create", "--allow", "api.example", "--inject",
                   "api.example/v1/:Authorization=secret:gh", "--inject", "*.example:X-Team=a=b"})
                  .status.exit_code,
              0);
    EXPECT_EQ(server.requests().back().json_body()["network"],
              json({{"allow", {"api.example"}},
                    {"rules",
                     {{{"domain", "api.example"},
                       {"path", "/v1/"},
                       {"headers", {{"Authorization", "secret:gh"}}}},
                      {{"domain", "*.example"}, {"headers", {{"X-Team", "a=b"}}}}}}}));
    EXPECT_EQ(run({"create", "--inject", "api.example:NoValue"}).status.exit_code, 2);
    ASSERT_EQ(run({"create", "--proxy", "corp"}).status.exit_code, 0);
    EXPECT_EQ(server.requests().back().json_body()["network"], json({{"proxy", "corp"}}));
    EXPECT_EQ(run({"create", "--network", "off", "--proxy", "corp"}).status.exit_code, 2);
}

TEST_F(CliTest, SecretSetReadsTheValueFromStdinNeverTheCommandLine) {
    server.set_handler([](const RecordedRequest& r) {
        if (r.method == "GET")
            return json_answer(
                {{"secrets", {{{"name", "gh"}, {"created_at", "t0"}, {"updated_at", "t1"}}}}});
        if (r.method == "DELETE") return json_answer({{"deleted", "gh"}});
        return json_answer({{"name", "gh"}}, 201);
    });
    RunResult set = run({"secret", "set", "gh"}, "Bearer xyz\n");
    ASSERT_EQ(set.status.exit_code, 0) << set.err;
    EXPECT_EQ(set.out, "gh\n");
    RunResult listed = run({"secret", "ls"});
    EXPECT_NE(listed.out.find("gh"), std::string::npos) << listed.out;
    EXPECT_EQ(run({"secret", "rm", "gh"}).status.exit_code, 0);
    EXPECT_EQ(run({"secret", "set", "gh"}, "").status.exit_code, 2) << "an empty value";
    EXPECT_EQ(run({"secret", "set", "gh", "value-on-the-line"}).status.exit_code, 2);
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 3u);
    EXPECT_EQ(requests[0].path, "/v1/secrets");
    EXPECT_EQ(requests[0].json_body(), json({{"name", "gh"}, {"value", "Bearer xyz"}}));
    EXPECT_EQ(requests[2].method, "DELETE");
    EXPECT_EQ(requests[2].path, "/v1/secrets/gh");
}

TEST_F(CliTest, NetworkSendsOnlyThePartsGivenAndNullForThoseTakenAway) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"policy", {{"allow", {"b.test"}}}}});
    });
    RunResult result =
        run({"network", "sb-n", "--allow", "a.test", "--allow", "b.test", "--no-rules", "--inject",
             "x.test/v1:X-Key=secret:k", "--egress-kbps", "0"});
    EXPECT_EQ(result.status.exit_code, 2) << "--no-rules contradicts --inject";
    result = run({"network", "sb-n", "--allow", "a.test", "--allow", "b.test", "--no-deny",
                  "--inject", "x.test/v1:X-Key=secret:k", "--egress-kbps", "0"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_NE(result.out.find("b.test"), std::string::npos) << result.out;
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].method, "PATCH");
    EXPECT_EQ(requests[0].path, "/v1/sandboxes/sb-n/network");
    EXPECT_EQ(
        requests[0].json_body(),
        json({{"allow", {"a.test", "b.test"}},
              {"deny", nullptr},
              {"rules",
               {{{"domain", "x.test"}, {"path", "/v1"}, {"headers", {{"X-Key", "secret:k"}}}}}},
              {"egress_kbps", 0}}));
    ASSERT_EQ(run({"network", "sb-n", "--default-proxy"}).status.exit_code, 0);
    EXPECT_EQ(server.requests().back().json_body(), json({{"proxy", nullptr}}));
    ASSERT_EQ(run({"network", "sb-n", "--proxy", "corp"}).status.exit_code, 0);
    EXPECT_EQ(server.requests().back().json_body(), json({{"proxy", "corp"}}));
}

TEST_F(CliTest, PortsListsWhatListensWithItsUrl) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"id", "sb-p"},
                            {"control_token", "ctl"},
                            {"ports",
                             {{{"port", 8000},
                               {"addresses", {"0.0.0.0"}},
                               {"reachable", true},
                               {"path", "/v1/sandboxes/sb-p/ports/8000/"}},
                              {{"port", 5432},
                               {"addresses", {"127.0.0.1"}},
                               {"reachable", false},
                               {"path", "/v1/sandboxes/sb-p/ports/5432/"}}}}});
    });
    RunResult result = run({"ports", "sb-p"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_NE(result.out.find("8000\t0.0.0.0\t" + server.url() +
                              "/v1/sandboxes/sb-p/ports/8000/?token=ctl\n"),
              std::string::npos)
        << result.out;
    EXPECT_NE(result.out.find("5432\t127.0.0.1\t"), std::string::npos);
    EXPECT_NE(result.out.find("(not reachable: listens on loopback only)"), std::string::npos);
    EXPECT_EQ(only_request().line(), "GET /v1/sandboxes/sb-p");
}

TEST_F(CliTest, ServerAndApiKeyComeFromTheEnvironment) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"sandboxes", json::array()}});
    });
    RunResult result =
        run_deskbox({"list"}, "", {"DESKBOX_SERVER=" + server.url(), "DESKBOX_API_KEY=from-env"});
    EXPECT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(only_request().header("authorization"), "Bearer from-env");
}

TEST_F(CliTest, ListPrintsATableOrJson) {
    json answer = {{"sandboxes",
                    {{{"id", "sb-1"},
                      {"state", "running"},
                      {"template", "minimal"},
                      {"runtime", "container"},
                      {"resolution", {1280, 800}},
                      {"expires_at", "2030-01-01T00:00:00Z"}},
                     {{"id", "sb-2"},
                      {"state", "paused"},
                      {"template", "desktop"},
                      {"runtime", "microvm"},
                      {"resolution", {800, 600}}}}}};
    server.set_handler([&](const RecordedRequest&) { return json_answer(answer); });
    RunResult table = run({"list"});
    ASSERT_EQ(table.status.exit_code, 0) << table.err;
    std::istringstream lines(table.out);
    std::string header, first, second;
    std::getline(lines, header);
    std::getline(lines, first);
    std::getline(lines, second);
    EXPECT_EQ(header.rfind("ID", 0), 0u);
    EXPECT_NE(header.find("STATE"), std::string::npos);
    EXPECT_EQ(first.rfind("sb-1", 0), 0u);
    EXPECT_NE(first.find("1280x800"), std::string::npos);
    EXPECT_NE(first.find("2030-01-01T00:00:00Z"), std::string::npos);
    EXPECT_NE(second.find("paused"), std::string::npos);
    EXPECT_NE(second.find("microvm"), std::string::npos);

    RunResult as_json = run({"list", "--json"});
    EXPECT_EQ(json::parse(as_json.out), answer);
    for (const auto& request : server.requests()) EXPECT_EQ(request.line(), "GET /v1/sandboxes");
}

TEST_F(CliTest, VolumeCommandsAndCreateVolume) {
    server.set_handler([](const RecordedRequest& request) {
        if (request.line() == "GET /v1/volumes")
            return json_answer(
                {{"volumes",
                  {{{"name", "work"},
                    {"size_mb", 2048},
                    {"used_bytes", 1 << 20},
                    {"created_at", "2026-12-06T10:00:00Z"},
                    {"mounts",
                     {{{"sandbox_id", "sb-1"}, {"path", "/data"}, {"read_only", true}}}}}}}});
        if (request.path == "/v1/sandboxes") return json_answer({{"id", "sb-2"}}, 201);
        if (request.method == "DELETE") return json_answer({{"deleted", "work"}});
        return json_answer({{"name", "work"}, {"size_mb", 2048}}, 201);
    });
    EXPECT_EQ(run({"volume", "create", "work", "--size", "2048", "--label", "team=qa"}).out,
              "work\n");
    RunResult listed = run({"volume", "ls"});
    EXPECT_NE(listed.out.find("sb-1(ro)"), std::string::npos) << listed.out;
    EXPECT_NE(listed.out.find("2.0 GiB"), std::string::npos) << listed.out;
    EXPECT_EQ(run({"volume", "rm", "work"}).out, "work\n");
    EXPECT_EQ(run({"create", "--volume", "work:/data", "--volume", "ref:/mnt/ref:ro"}).out,
              "sb-2\n");
    EXPECT_EQ(run({"create", "--volume", "work"}).status.exit_code, 2);
    EXPECT_EQ(run({"create", "--volume", "work:/data:rx"}).status.exit_code, 2);
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 4u);
    EXPECT_EQ(requests[0].line(), "POST /v1/volumes");
    EXPECT_EQ(requests[0].json_body(),
              json({{"name", "work"}, {"size_mb", 2048}, {"labels", {{"team", "qa"}}}}));
    EXPECT_EQ(requests[2].line(), "DELETE /v1/volumes/work");
    EXPECT_EQ(requests[3].json_body()["volumes"],
              json({{{"name", "work"}, {"path", "/data"}, {"read_only", false}},
                    {{"name", "ref"}, {"path", "/mnt/ref"}, {"read_only", true}}}));
}

TEST_F(CliTest, SnapshotCommandsForkAndCreateFromSnapshot) {
    server.set_handler([](const RecordedRequest& request) {
        if (request.line() == "GET /v1/snapshots")
            return json_answer({{"snapshots",
                                 {{{"name", "warm"},
                                   {"kind", "filesystem"},
                                   {"runtime", "container"},
                                   {"template", "minimal"},
                                   {"source_sandbox", "sb-1"},
                                   {"size_bytes", 3 << 20},
                                   {"created_at", "2026-12-06T10:00:00Z"}}}}});
        if (request.path == "/v1/sandboxes/sb-1/fork")
            return json_answer({{"sandboxes", {{{"id", "sb-2"}}, {{"id", "sb-3"}}}},
                                {"kind", "filesystem"},
                                {"save_ms", 5},
                                {"total_ms", 900}},
                               201);
        if (request.path == "/v1/sandboxes") return json_answer({{"id", "sb-4"}}, 201);
        if (request.path == "/v1/snapshots/gone")
            return error_answer(404, "not_found", "no snapshot gone");
        if (request.method == "DELETE") return json_answer({{"deleted", "warm"}});
        if (request.method == "GET") return json_answer({{"name", "warm"}, {"kind", "filesystem"}});
        return json_answer({{"name", "warm"}, {"kind", "filesystem"}}, 201);
    });
    EXPECT_EQ(run({"snapshot", "create", "sb-1", "warm", "--metadata", "step=login"}).out,
              "warm\n");
    RunResult listed = run({"snapshot", "ls"});
    EXPECT_NE(listed.out.find("3.0 MiB"), std::string::npos) << listed.out;
    EXPECT_NE(listed.out.find("filesystem"), std::string::npos) << listed.out;
    EXPECT_NE(run({"snapshot", "inspect", "warm"}).out.find("\"kind\": \"filesystem\""),
              std::string::npos);
    RunResult removed = run({"snapshot", "rm", "warm", "gone"});
    EXPECT_EQ(removed.out, "warm\n");
    EXPECT_EQ(removed.status.exit_code, 1);
    EXPECT_NE(removed.err.find("gone"), std::string::npos) << removed.err;
    EXPECT_EQ(run({"fork", "sb-1", "--count", "2"}).out, "sb-2\nsb-3\n");
    EXPECT_EQ(run({"create", "--snapshot", "warm", "--auto-resume"}).out, "sb-4\n");
    EXPECT_EQ(run({"create", "--auto-resume", "--on-timeout", "kill"}).status.exit_code, 2);
    EXPECT_EQ(run({"fork", "sb-1", "--count", "17"}).status.exit_code, 2);
    EXPECT_EQ(run({"snapshot", "create", "sb-1"}).status.exit_code, 2);
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 7u);
    EXPECT_EQ(requests[0].line(), "POST /v1/sandboxes/sb-1/snapshots");
    EXPECT_EQ(requests[0].json_body(), json({{"name", "warm"}, {"metadata", {{"step", "login"}}}}));
    EXPECT_EQ(requests[2].line(), "GET /v1/snapshots/warm");
    EXPECT_EQ(requests[3].line(), "DELETE /v1/snapshots/warm");
    EXPECT_EQ(requests[5].line(), "POST /v1/sandboxes/sb-1/fork");
    EXPECT_EQ(requests[5].json_body(), json({{"count", 2}}));
    // From a snapshot the template and size are the snapshot's: the request names neither.
    const json created = requests[6].json_body();
    EXPECT_EQ(created["snapshot"], "warm");
    EXPECT_EQ(created["auto_resume"], true);
    EXPECT_FALSE(created.contains("template"));
    EXPECT_FALSE(created.contains("resolution"));
}

TEST_F(CliTest, LifecycleCommandsHitTheirPaths) {
    server.set_handler([](const RecordedRequest& request) {
        if (request.path == "/v1/sandboxes/sb-1/timeout") {
            return json_answer({{"id", "sb-1"}, {"expires_at", "2030-01-01T00:10:00Z"}});
        }
        return json_answer({{"id", "sb-1"}, {"state", "running"}});
    });
    EXPECT_EQ(run({"inspect", "sb-1"}).status.exit_code, 0);
    EXPECT_EQ(run({"pause", "sb-1"}).out, "sb-1\n");
    EXPECT_EQ(run({"resume", "sb-1"}).status.exit_code, 0);
    RunResult timeout = run({"timeout", "sb-1", "900"});
    EXPECT_EQ(timeout.out, "sb-1 expires at 2030-01-01T00:10:00Z\n");
    EXPECT_EQ(run({"kill", "sb-1"}).out, "sb-1\n");
    EXPECT_EQ(run({"pause", "sb-1", "--snapshot"}).out, "sb-1\n");
    EXPECT_EQ(run({"resume", "sb-1", "--snapshot"}).status.exit_code, 2) << "pause only";

    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 6u);
    EXPECT_EQ(requests[5].line(), "POST /v1/sandboxes/sb-1/pause");
    EXPECT_EQ(requests[5].json_body(), json({{"snapshot", true}}));
    EXPECT_EQ(requests[0].line(), "GET /v1/sandboxes/sb-1");
    EXPECT_EQ(requests[1].line(), "POST /v1/sandboxes/sb-1/pause");
    EXPECT_EQ(requests[1].header("content-length"), "0");
    EXPECT_EQ(requests[2].line(), "POST /v1/sandboxes/sb-1/resume");
    EXPECT_EQ(requests[3].line(), "POST /v1/sandboxes/sb-1/timeout");
    EXPECT_EQ(requests[3].json_body(), json({{"timeout_s", 900}}));
    EXPECT_EQ(requests[4].line(), "DELETE /v1/sandboxes/sb-1");
}

TEST_F(CliTest, KillGoesOnAfterOneFailureAndExitsOne) {
    server.set_handler([](const RecordedRequest& request) {
        if (request.path == "/v1/sandboxes/gone") {
            return error_answer(404, "not_found", "no sandbox \"gone\"", "id");
        }
        return json_answer(json::object());
    });
    RunResult result = run({"kill", "sb-a", "gone", "sb-b"});
    EXPECT_EQ(result.status.exit_code, 1);
    EXPECT_EQ(result.out, "sb-a\nsb-b\n");
    EXPECT_NE(result.err.find("no sandbox \"gone\""), std::string::npos) << result.err;
    EXPECT_EQ(server.requests().size(), 3u);
}

TEST_F(CliTest, SandboxIdsArePercentEncodedInPaths) {
    run({"inspect", "a/b c"});
    EXPECT_EQ(only_request().target, "/v1/sandboxes/a%2Fb%20c");
}

// --- errors --------------------------------------------------------------------------------

TEST_F(CliTest, ApiErrorsPrintCodeMessageFieldAndExitOne) {
    server.set_handler([](const RecordedRequest&) {
        return error_answer(400, "bad_request", "resolution: width must be from 320 to 7680",
                            "resolution");
    });
    RunResult result = run({"create", "--size", "100x100"});
    EXPECT_EQ(result.status.exit_code, 1);
    EXPECT_EQ(result.out, "");
    EXPECT_NE(result.err.find("resolution: width must be from 320 to 7680"), std::string::npos)
        << result.err;
    EXPECT_NE(result.err.find("bad_request"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("field resolution"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("400"), std::string::npos) << result.err;
}

TEST_F(CliTest, NonJsonErrorBodiesStillSayWhatHappened) {
    server.set_handler([](const RecordedRequest&) {
        return raw_answer(502, "upstream exploded\n", "text/plain");
    });
    RunResult result = run({"list"});
    EXPECT_EQ(result.status.exit_code, 1);
    EXPECT_NE(result.err.find("upstream exploded"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("502"), std::string::npos) << result.err;
}

TEST_F(CliTest, UnauthorizedWithoutKeyHintsAtTheKey) {
    server.set_handler([](const RecordedRequest&) {
        return error_answer(401, "unauthorized", "missing or wrong API key");
    });
    RunResult result = run({"list"});
    EXPECT_EQ(result.status.exit_code, 1);
    EXPECT_NE(result.err.find("missing or wrong API key"), std::string::npos);
    EXPECT_NE(result.err.find("DESKBOX_API_KEY"), std::string::npos) << result.err;
}

TEST(CliConnection, RefusedConnectionSaysHowToStartTheServer) {
    // A port that was just free: bind, note it, close.
    unsigned short port;
    {
        asio::io_context io;
        tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        port = acceptor.local_endpoint().port();
    }
    std::string url = "http://127.0.0.1:" + std::to_string(port);
    RunResult result = run_deskbox({"--server", url, "list"});
    EXPECT_EQ(result.status.exit_code, 1);
    EXPECT_EQ(result.err, "deskbox: cannot reach deskboxd at " + url +
                              ": is it running? (scripts/run.sh starts it)\n");
}

TEST_F(CliTest, UsageErrorsExitTwoWithoutTouchingTheServer) {
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    const std::vector<Case> cases = {
        {{}, "no command given"},
        {{"frobnicate"}, "unknown command \"frobnicate\""},
        {{"click", "sb"}, "usage: deskbox click"},
        {{"click", "sb", "10", "ten"}, "Y: expected an integer, got \"ten\""},
        {{"create", "--size", "wide"}, "--size: expected WIDTHxHEIGHT"},
        {{"create", "--bogus"}, "unknown option --bogus for 'create'"},
        {{"create", "--on-timeout", "explode"}, "--on-timeout: expected kill or pause"},
        {{"create", "--env", "=x"}, "--env: expected NAME=VALUE"},
        {{"create", "--network", "maybe"}, "--network: expected on or off"},
        {{"create", "--network", "off", "--allow", "x.example"}, "--network off reaches nothing"},
        {{"act", "sb", "{not json"}, "ACTION is not valid JSON"},
        {{"act", "sb", "[1]"}, "ACTION must be a JSON object"},
        {{"screenshot", "sb", "--format", "gif"}, "--format: expected png, jpeg or webp"},
        {{"exec", "sb"}, "no command given"},
        {{"exec", "sb", "--shell", "ls", "--", "ls"}, "either --shell LINE or a command"},
        {{"files", "get", "sb", "relative/path"}, "PATH must be absolute"},
        {{"files", "chmod", "sb", "/x"}, "expected get, put, ls or rm"},
        {{"timeout", "sb", "-5"}, "SECONDS: must be from 0"},
        {{"network", "sb"}, "nothing to change"},
        {{"network", "sb", "--allow", "x.test", "--allow-all"},
         "--allow-all and --allow contradict"},
        {{"network", "sb", "--inject", "x.test"}, "--inject: expected DOMAIN[/PATH]:HEADER=VALUE"},
        {{"type", "sb", "\xff\xfe"}, "not valid UTF-8"},
        {{"--server", "https://example.com", "list"}, "https is not supported"},
    };
    for (const auto& c : cases) {
        std::vector<std::string> args = c.args;
        // --server after the command too, except where the case sets its own.
        if (args.empty() || args[0] != "--server")
            args.insert(args.begin(), {"--server", server.url()});
        RunResult result = run_deskbox(args);
        std::string shown = json(c.args).dump(-1, ' ', false, json::error_handler_t::replace);
        EXPECT_EQ(result.status.exit_code, 2) << shown << "\n" << result.err;
        EXPECT_NE(result.err.find(c.message), std::string::npos) << shown << "\n" << result.err;
    }
    EXPECT_EQ(server.requests().size(), 0u);
}

TEST_F(CliTest, HelpExitsZero) {
    RunResult main_help = run_deskbox({"--help"});
    EXPECT_EQ(main_help.status.exit_code, 0);
    EXPECT_NE(main_help.out.find("usage: deskbox"), std::string::npos);
    RunResult command_help = run_deskbox({"exec", "--help"});
    EXPECT_EQ(command_help.status.exit_code, 0);
    EXPECT_NE(command_help.out.find("--shell"), std::string::npos);
}

// --- desktop -------------------------------------------------------------------------------

TEST_F(CliTest, ScreenshotSendsTheQueryAndSavesTheBytesExactly) {
    const std::string image = binary_blob(3 << 20);  // larger than any one socket read
    server.set_handler([&](const RecordedRequest&) {
        return raw_answer(200, image, "image/jpeg",
                          {{"X-Screen-Width", "1280"}, {"X-Screen-Height", "800"}});
    });
    fs::path output = temp.path() / "shot.jpg";
    RunResult result = run({"screenshot", "sb-1", "-o", output.string(), "--format", "jpeg",
                            "--quality", "80", "--width", "640"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(result.out, output.string() + "\n");
    EXPECT_TRUE(read_file(output) == image);
    RecordedRequest request = only_request();
    EXPECT_EQ(request.line(), "GET /v1/sandboxes/sb-1/screenshot");
    EXPECT_EQ(request.query, (std::map<std::string, std::string>{
                                 {"format", "jpeg"}, {"quality", "80"}, {"width", "640"}}));
    // No temporary file is left beside it.
    EXPECT_EQ(std::distance(fs::directory_iterator(temp.path()), fs::directory_iterator()), 1);
}

TEST_F(CliTest, ScreenshotToStdoutAndDefaultName) {
    const std::string image = binary_blob(5000);
    server.set_handler([&](const RecordedRequest&) { return raw_answer(200, image, "image/png"); });
    RunResult to_stdout = run({"screenshot", "sb-1", "-o", "-"});
    EXPECT_TRUE(to_stdout.out == image);
    EXPECT_EQ(server.requests().at(0).query.at("format"), "png");

    // The default name lands in the working directory: run through a shell that cds there.
    RunResult named = run_process({"/bin/sh", "-c",
                                   "cd \"$1\" && exec /usr/bin/env -u DESKBOX_SERVER \"$2\" "
                                   "--server \"$3\" screenshot sb-1",
                                   "sh", temp.path().string(), kDeskbox, server.url()});
    EXPECT_EQ(named.status.exit_code, 0) << named.err;
    EXPECT_EQ(named.out, "screenshot-sb-1.png\n");
    EXPECT_TRUE(read_file(temp.path() / "screenshot-sb-1.png") == image);
}

TEST_F(CliTest, ActPassesTheJsonAndDialectThrough) {
    json results = {{"results", {{{"ok", true}}}}};
    server.set_handler([&](const RecordedRequest&) { return json_answer(results); });
    json action = {{"action", "left_click"}, {"coordinate", {10, 20}}};
    RunResult result = run({"act", "sb-1", action.dump(), "--dialect", "anthropic"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(json::parse(result.out), results);
    RecordedRequest request = only_request();
    EXPECT_EQ(request.line(), "POST /v1/sandboxes/sb-1/actions");
    EXPECT_EQ(request.query.at("dialect"), "anthropic");
    EXPECT_EQ(request.json_body(), action);

    json batch = {{"actions", {{{"type", "wait"}, {"duration_ms", 5}}}}};
    RunResult from_stdin = run({"act", "sb-1", "-"}, batch.dump());
    ASSERT_EQ(from_stdin.status.exit_code, 0) << from_stdin.err;
    EXPECT_EQ(server.requests().at(1).json_body(), batch);
    EXPECT_EQ(server.requests().at(1).target, "/v1/sandboxes/sb-1/actions");
}

TEST_F(CliTest, ActionShortcutsBuildNativeActions) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"results", {json::object()}}});
    });
    const std::string text = "Grêmio — 日本語 🎉\n";
    ASSERT_EQ(
        run({"click", "sb", "10", "20", "--button", "right", "--count", "2"}).status.exit_code, 0);
    ASSERT_EQ(run({"click", "sb", "0", "0"}).status.exit_code, 0);
    ASSERT_EQ(run({"move", "sb", "5", "6"}).status.exit_code, 0);
    ASSERT_EQ(run({"scroll", "sb", "100", "200", "-3", "--dx", "1"}).status.exit_code, 0);
    ASSERT_EQ(run({"type", "sb", text}).status.exit_code, 0);
    ASSERT_EQ(run({"key", "sb", "ctrl+shift+t"}).status.exit_code, 0);
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 6u);
    for (const auto& request : requests) EXPECT_EQ(request.line(), "POST /v1/sandboxes/sb/actions");
    EXPECT_EQ(requests[0].json_body(),
              json({{"type", "click"}, {"x", 10}, {"y", 20}, {"button", "right"}, {"count", 2}}));
    EXPECT_EQ(requests[1].json_body(), json({{"type", "click"}, {"x", 0}, {"y", 0}}));
    EXPECT_EQ(requests[2].json_body(), json({{"type", "move"}, {"x", 5}, {"y", 6}}));
    EXPECT_EQ(requests[3].json_body(),
              json({{"type", "scroll"}, {"x", 100}, {"y", 200}, {"dy", -3}, {"dx", 1}}));
    EXPECT_EQ(requests[4].json_body(), json({{"type", "type"}, {"text", text}}));
    EXPECT_EQ(requests[5].json_body(), json({{"type", "key"}, {"keys", "ctrl+shift+t"}}));
}

TEST_F(CliTest, WindowsClipboardAndCursor) {
    server.set_handler([](const RecordedRequest& request) {
        if (request.path.ends_with("/windows")) {
            return json_answer({{"windows",
                                 {{{"id", 4194305},
                                   {"title", "user@box: ~"},
                                   {"class", "XTerm"},
                                   {"x", 10},
                                   {"y", 20},
                                   {"width", 484},
                                   {"height", 316},
                                   {"active", true},
                                   {"visible", true}}}},
                                {"active", 4194305}});
        }
        if (request.path.ends_with("/cursor")) return json_answer({{"x", 640}, {"y", 400}});
        if (request.method == "GET") return json_answer({{"text", "cópia 日本"}});
        return json_answer(json::object());
    });
    RunResult windows = run({"windows", "sb"});
    ASSERT_EQ(windows.status.exit_code, 0) << windows.err;
    EXPECT_NE(windows.out.find("4194305"), std::string::npos) << windows.out;
    EXPECT_NE(windows.out.find("484x316+10+20"), std::string::npos) << windows.out;
    EXPECT_NE(windows.out.find("user@box: ~"), std::string::npos) << windows.out;
    EXPECT_EQ(run({"cursor", "sb"}).out, "640 400\n");
    EXPECT_EQ(run({"clipboard", "get", "sb"}).out, "cópia 日本");
    EXPECT_EQ(run({"clipboard", "set", "sb", "olá"}).status.exit_code, 0);
    EXPECT_EQ(run({"clipboard", "set", "sb", "-"}, "from stdin\n").status.exit_code, 0);

    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 5u);
    EXPECT_EQ(requests[0].line(), "GET /v1/sandboxes/sb/windows");
    EXPECT_EQ(requests[1].line(), "GET /v1/sandboxes/sb/cursor");
    EXPECT_EQ(requests[2].line(), "GET /v1/sandboxes/sb/clipboard");
    EXPECT_EQ(requests[3].line(), "PUT /v1/sandboxes/sb/clipboard");
    EXPECT_EQ(requests[3].json_body(), json({{"text", "olá"}}));
    EXPECT_EQ(requests[4].json_body(), json({{"text", "from stdin\n"}}));
}

TEST_F(CliTest, KillProcessesPostsAndSaysHowMany) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"killed", 44}, {"refused", 0}, {"rounds", 2}});
    });
    RunResult killed = run({"kill-processes", "sb"});
    ASSERT_EQ(killed.status.exit_code, 0) << killed.err;
    EXPECT_EQ(killed.out, "killed 44 processes\n");
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].line(), "POST /v1/sandboxes/sb/processes/kill");
    EXPECT_NE(run({"kill-processes"}).status.exit_code, 0);  // the id is required
}

// --- commands and files --------------------------------------------------------------------

TEST_F(CliTest, ExecPrintsOutputAndExitsWithTheCommandsCode) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"exit_code", 3},
                            {"stdout", "out line\n"},
                            {"stderr", "err line\n"},
                            {"timed_out", false}});
    });
    RunResult result = run({"exec", "sb", "--env", "A=1", "--cwd", "/tmp", "--timeout", "30", "ls",
                            "-la", "/tmp dir"});
    EXPECT_EQ(result.status.exit_code, 3);
    EXPECT_EQ(result.out, "out line\n");
    EXPECT_EQ(result.err, "err line\n");
    RecordedRequest request = only_request();
    EXPECT_EQ(request.line(), "POST /v1/sandboxes/sb/commands");
    EXPECT_EQ(request.json_body(), json({{"argv", {"ls", "-la", "/tmp dir"}},
                                         {"env", {{"A", "1"}}},
                                         {"cwd", "/tmp"},
                                         {"timeout_s", 30}}));
}

TEST_F(CliTest, ExecShellStdinBackgroundAndDashDash) {
    server.set_handler([](const RecordedRequest& request) {
        if (request.json_body().value("background", false)) return json_answer({{"pid", 4242}});
        return json_answer({{"exit_code", 0}, {"stdout", ""}, {"stderr", ""}});
    });
    EXPECT_EQ(run({"exec", "sb", "--shell", "echo $HOME | wc -c"}).status.exit_code, 0);
    EXPECT_EQ(run({"exec", "sb", "-i", "--", "cat", "--number"}, "piped\n").status.exit_code, 0);
    RunResult background = run({"exec", "sb", "--background", "--", "xterm"});
    EXPECT_EQ(background.out, "4242\n");
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 3u);
    EXPECT_EQ(requests[0].json_body(), json({{"cmd", "echo $HOME | wc -c"}}));
    EXPECT_EQ(requests[1].json_body(), json({{"argv", {"cat", "--number"}}, {"stdin", "piped\n"}}));
    EXPECT_EQ(requests[2].json_body(), json({{"argv", {"xterm"}}, {"background", true}}));
}

TEST_F(CliTest, ExecTimedOutWithoutCodeExits124) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer({{"exit_code", nullptr}, {"stdout", "partial"}, {"timed_out", true}});
    });
    RunResult result = run({"exec", "sb", "sleep", "100"});
    EXPECT_EQ(result.status.exit_code, 124);
    EXPECT_EQ(result.out, "partial");
    EXPECT_NE(result.err.find("timed out"), std::string::npos);
}

TEST_F(CliTest, FilesGetIsByteExactToAFileAndToStdout) {
    const std::string blob = binary_blob(1 << 20);
    server.set_handler(
        [&](const RecordedRequest&) { return raw_answer(200, blob, "application/octet-stream"); });
    fs::path local = temp.path() / "copy.bin";
    RunResult to_file = run({"files", "get", "sb", "/home/user/a b/ü.bin", "-o", local.string()});
    ASSERT_EQ(to_file.status.exit_code, 0) << to_file.err;
    EXPECT_EQ(to_file.out, "");
    EXPECT_TRUE(read_file(local) == blob);
    RunResult to_stdout = run({"files", "get", "sb", "/etc/x"});
    EXPECT_EQ(to_stdout.out.size(), blob.size());
    EXPECT_TRUE(to_stdout.out == blob);

    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 2u);
    EXPECT_EQ(requests[0].line(), "GET /v1/sandboxes/sb/files");
    EXPECT_EQ(requests[0].target, "/v1/sandboxes/sb/files?path=/home/user/a%20b/%C3%BC.bin");
    EXPECT_EQ(requests[0].query.at("path"), "/home/user/a b/ü.bin");
}

TEST_F(CliTest, FilesGetErrorLeavesNoLocalFile) {
    server.set_handler([](const RecordedRequest&) {
        return error_answer(404, "not_found", "/nope: no such file", "path");
    });
    fs::path local = temp.path() / "never.bin";
    RunResult result = run({"files", "get", "sb", "/nope", "-o", local.string()});
    EXPECT_EQ(result.status.exit_code, 1);
    EXPECT_NE(result.err.find("/nope: no such file"), std::string::npos);
    EXPECT_FALSE(fs::exists(local));
}

TEST_F(CliTest, FilesPutUploadsTheBytesExactly) {
    const std::string blob = binary_blob(2 << 20);
    fs::path local = temp.path() / "upload.bin";
    write_file(local, blob);
    RunResult from_file = run({"files", "put", "sb", local.string(), "/tmp/up.bin"});
    ASSERT_EQ(from_file.status.exit_code, 0) << from_file.err;
    RunResult from_stdin = run({"files", "put", "sb", "-", "/tmp/stdin.bin"}, blob.substr(0, 1000));
    ASSERT_EQ(from_stdin.status.exit_code, 0) << from_stdin.err;
    RunResult with_mode =
        run({"files", "put", "sb", local.string(), "/tmp/run.sh", "--mode", "0755"});
    ASSERT_EQ(with_mode.status.exit_code, 0) << with_mode.err;
    RunResult bad_mode = run({"files", "put", "sb", local.string(), "/tmp/x", "--mode", "rwx"});
    EXPECT_EQ(bad_mode.status.exit_code, 2);
    EXPECT_NE(bad_mode.err.find("--mode: expected octal digits"), std::string::npos);
    RunResult missing = run({"files", "put", "sb", (temp.path() / "absent").string(), "/tmp/x"});
    EXPECT_EQ(missing.status.exit_code, 1);
    EXPECT_NE(missing.err.find("cannot read"), std::string::npos);

    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 3u);
    EXPECT_EQ(requests[2].query,
              (std::map<std::string, std::string>{{"path", "/tmp/run.sh"}, {"mode", "0755"}}));
    EXPECT_EQ(requests[0].line(), "PUT /v1/sandboxes/sb/files");
    EXPECT_EQ(requests[0].query.at("path"), "/tmp/up.bin");
    EXPECT_EQ(requests[0].header("content-type"), "application/octet-stream");
    EXPECT_EQ(requests[0].body.size(), blob.size());
    EXPECT_TRUE(requests[0].body == blob);
    EXPECT_TRUE(requests[1].body == blob.substr(0, 1000));
}

// --- seeing the screen -----------------------------------------------------------------------

TEST_F(CliTest, WaitLocateOcrAndCompareSendTheirBodiesAndExitThreeOnNoMatch) {
    const std::string png = "\x89PNG\r\n\x1a\n fake bytes";
    fs::path image = temp.path() / "button.png";
    write_file(image, png);
    server.set_handler([](const RecordedRequest& request) {
        if (request.target.find("/wait") != std::string::npos) {
            const bool text = request.json_body().value("until", "") == "text";
            return json_answer({{"matched", text},
                                {"until", request.json_body()["until"]},
                                {"elapsed_ms", 12},
                                {"frame_version", 3}});
        }
        if (request.target.find("/locate") != std::string::npos) {
            json matches = json::array();
            if (request.json_body().contains("text"))
                matches.push_back({{"x", 1},
                                   {"y", 2},
                                   {"width", 3},
                                   {"height", 4},
                                   {"score", 0.9},
                                   {"center", {2, 4}},
                                   {"text", "OK"}});
            return json_answer({{"matches", matches}, {"frame_version", 3}, {"elapsed_ms", 1}});
        }
        if (request.target.find("/ocr") != std::string::npos)
            return json_answer(
                {{"text", "hello\nworld"}, {"lines", json::array()}, {"words", json::array()}});
        return json_answer({{"identical", false},
                            {"changed_pixels", 6},
                            {"ssim", 0.5},
                            {"changed", {{1, 2, 3, 2}}},
                            {"diff_image", "aGVsbG8="}});
    });
    RunResult waited = run({"wait", "sb", "--text", "Save", "--timeout-ms", "2500"});
    EXPECT_EQ(waited.status.exit_code, 0) << waited.err;
    EXPECT_EQ(waited.out, "matched after 12 ms\n");
    RunResult stable =
        run({"wait", "sb", "--until", "stable", "--stable-ms", "50", "--region", "1,2,30,40"});
    EXPECT_EQ(stable.status.exit_code, 3);
    EXPECT_EQ(stable.out, "timed out after 12 ms\n");
    RunResult found = run({"locate", "sb", "--text", "OK", "--exact"});
    EXPECT_EQ(found.status.exit_code, 0) << found.err;
    EXPECT_EQ(found.out, "1 2 3 4 score 0.9 OK\n");
    RunResult none = run({"locate", "sb", "--image", image.string(), "--threshold", "0.8",
                          "--grayscale", "--max-results", "2"});
    EXPECT_EQ(none.status.exit_code, 3);
    RunResult read = run({"ocr", "sb", "--region", "0,0,100,50"});
    EXPECT_EQ(read.out, "hello\nworld\n");
    fs::path diff = temp.path() / "diff.png";
    RunResult compared = run({"compare", "sb", image.string(), "--mask", "0,0,5,5", "--mask",
                              "9,9,1,1", "--tolerance", "4", "--diff", diff.string()});
    EXPECT_EQ(compared.status.exit_code, 3);
    EXPECT_NE(compared.out.find("changed 1,2,3,2"), std::string::npos) << compared.out;
    std::ifstream diff_file(diff, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(diff_file), {}), "hello");

    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 6u);
    EXPECT_EQ(requests[0].line(), "POST /v1/sandboxes/sb/wait");
    EXPECT_EQ(requests[0].json_body(),
              json({{"until", "text"}, {"text", "Save"}, {"timeout_ms", 2500}}));
    EXPECT_EQ(requests[1].json_body(), json({{"until", "stable"},
                                             {"stable_ms", 50},
                                             {"region", {1, 2, 30, 40}},
                                             {"timeout_ms", 10000}}));
    EXPECT_EQ(requests[2].json_body(), json({{"text", "OK"}, {"exact", true}}));
    json locate = requests[3].json_body();
    EXPECT_EQ(locate["threshold"], 0.8);
    EXPECT_EQ(locate["grayscale"], true);
    EXPECT_EQ(locate["max_results"], 2);
    // The image goes as base64 of the file's bytes ("iVBORw0KGgo" is base64 of the signature).
    EXPECT_EQ(locate["image"].get<std::string>().rfind("iVBORw0KGgo", 0), 0u) << locate.dump();
    EXPECT_EQ(requests[4].json_body(), json({{"region", {0, 0, 100, 50}}}));
    json compare = requests[5].json_body();
    EXPECT_EQ(compare["mask"], json({{0, 0, 5, 5}, {9, 9, 1, 1}}));
    EXPECT_EQ(compare["tolerance"], 4);
    EXPECT_EQ(compare["diff"], true);
    EXPECT_EQ(compare["baseline"], locate["image"]);

    EXPECT_EQ(run({"locate", "sb", "--region", "1,2,3"}).status.exit_code, 2);
    EXPECT_EQ(run({"compare", "sb"}).status.exit_code, 2);
    EXPECT_EQ(
        run({"locate", "sb", "--image", (temp.path() / "absent.png").string()}).status.exit_code,
        1);
}

TEST_F(CliTest, ClickAndMoveAimAtATargetInsteadOfCoordinates) {
    server.set_handler([](const RecordedRequest&) {
        return json_answer(
            {{"results", {{{"target", {{"center", {40, 50}}, {"x", 30}, {"y", 45}}}}}}});
    });
    RunResult clicked = run({"click", "sb", "--text", "Save As", "--index", "1", "--offset", "5,-2",
                             "--timeout-ms", "900", "--count", "2"});
    EXPECT_EQ(clicked.status.exit_code, 0) << clicked.err;
    EXPECT_EQ(clicked.out, "at 40 50\n");
    RunResult moved = run({"move", "sb", "--text", "File"});
    EXPECT_EQ(moved.status.exit_code, 0) << moved.err;
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 2u);
    EXPECT_EQ(
        requests[0].json_body(),
        json({{"type", "click"},
              {"count", 2},
              {"target",
               {{"text", "Save As"}, {"index", 1}, {"offset", {5, -2}}, {"timeout_ms", 900}}}}));
    EXPECT_EQ(requests[1].json_body(), json({{"type", "move"}, {"target", {{"text", "File"}}}}));
    EXPECT_EQ(run({"click", "sb", "1", "2", "--text", "x"}).status.exit_code, 2);
    EXPECT_EQ(run({"click", "sb"}).status.exit_code, 2);
    EXPECT_EQ(run({"click", "sb", "--text", "x", "--offset", "5"}).status.exit_code, 2);
}

TEST_F(CliTest, FilesLsAndRm) {
    server.set_handler([](const RecordedRequest& request) {
        if (request.method == "DELETE") return json_answer(json::object());
        if (request.query.at("path") == "/etc/hostname") {
            return raw_answer(200, "box\n", "application/octet-stream");
        }
        return json_answer(
            {{"entries",
              {{{"name", "notes.txt"}, {"type", "file"}, {"size", 12}, {"mode", 420}},
               {{"name", "sub"}, {"type", "directory"}, {"size", 4096}, {"mode", 493}}}}});
    });
    RunResult listing = run({"files", "ls", "sb", "/home/user"});
    ASSERT_EQ(listing.status.exit_code, 0) << listing.err;
    EXPECT_NE(listing.out.find("notes.txt"), std::string::npos);
    EXPECT_NE(listing.out.find("0644"), std::string::npos) << listing.out;
    EXPECT_NE(listing.out.find("0755"), std::string::npos) << listing.out;
    RunResult of_file = run({"files", "ls", "sb", "/etc/hostname"});
    EXPECT_EQ(of_file.status.exit_code, 1);
    EXPECT_NE(of_file.err.find("is a file"), std::string::npos);
    EXPECT_EQ(run({"files", "rm", "sb", "/tmp/x"}).status.exit_code, 0);
    EXPECT_EQ(run({"files", "rm", "-r", "sb", "/tmp/dir"}).status.exit_code, 0);
    auto requests = server.requests();
    ASSERT_EQ(requests.size(), 4u);
    EXPECT_EQ(requests[3].query,
              (std::map<std::string, std::string>{{"path", "/tmp/dir"}, {"recursive", "true"}}));
    EXPECT_EQ(requests[0].line(), "GET /v1/sandboxes/sb/files");
    EXPECT_EQ(requests[2].line(), "DELETE /v1/sandboxes/sb/files");
    EXPECT_EQ(requests[2].query.at("path"), "/tmp/x");
}

// --- demo ----------------------------------------------------------------------------------

// deskboxd as the demo sees it: the sandbox starts, no terminal shows until xterm is launched.
class DemoServer {
  public:
    explicit DemoServer(FakeServer& server, bool fail_actions = false, bool xterm_missing = false) {
        png_ = "\x89PNG\r\n\x1a\n" + binary_blob(10000);
        server.set_handler([this, fail_actions, xterm_missing](const RecordedRequest& request) {
            const std::string base = "/v1/sandboxes/demo-1";
            if (request.line() == "POST /v1/sandboxes") {
                return json_answer({{"id", "demo-1"},
                                    {"state", "starting"},
                                    {"view_token", "vt/+="},
                                    {"control_token", "ct"}},
                                   201);
            }
            if (request.line() == "GET " + base) {
                return json_answer(
                    {{"id", "demo-1"}, {"state", ++inspects_ < 2 ? "starting" : "running"}});
            }
            if (request.line() == "GET " + base + "/windows") {
                json windows = json::array({{{"id", 1},
                                             {"title", "openbox"},
                                             {"class", "Openbox"},
                                             {"x", 0},
                                             {"y", 0},
                                             {"width", 10},
                                             {"height", 10}}});
                if (xterm_started_) {
                    windows.push_back({{"id", 2},
                                       {"title", "user@deskbox: ~"},
                                       {"class", "XTerm"},
                                       {"x", 100},
                                       {"y", 50},
                                       {"width", 400},
                                       {"height", 300},
                                       {"active", true},
                                       {"visible", true}});
                }
                return json_answer({{"windows", windows}});
            }
            if (request.line() == "POST " + base + "/commands") {
                if (xterm_missing && request.json_body().at("argv").at(0) == "xterm") {
                    return error_answer(400, "bad_request", "xterm: No such file or directory",
                                        "argv");
                }
                xterm_started_ = true;
                return json_answer({{"pid", 77}});
            }
            if (request.line() == "POST " + base + "/actions") {
                if (fail_actions)
                    return error_answer(400, "invalid_action", "bad key", "actions[2].keys");
                return json_answer({{"results", json::array({{}, {}, {}, {}})}});
            }
            if (request.line() == "GET " + base + "/screenshot") {
                return raw_answer(200, png_, "image/png",
                                  {{"X-Screen-Width", "1280"}, {"X-Screen-Height", "800"}});
            }
            if (request.line() == "DELETE " + base) return json_answer(json::object());
            return error_answer(404, "not_found", "unexpected " + request.line());
        });
    }
    const std::string& png() const { return png_; }

  private:
    std::string png_;
    int inspects_ = 0;
    bool xterm_started_ = false;
};

std::vector<std::string> lines_of(const std::vector<RecordedRequest>& requests) {
    std::vector<std::string> lines;
    for (const auto& request : requests) lines.push_back(request.line());
    return lines;
}

TEST_F(CliTest, DemoTypesIntoATerminalSavesAScreenshotAndKills) {
    DemoServer demo(server);
    fs::path output = temp.path() / "demo.png";
    RunResult result = run({"demo", "-o", output.string(), "--start-terminal-after", "0"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(result.out,
              "sandbox:    demo-1\n"
              "viewer:     " +
                  server.url() +
                  "/view/demo-1?token=vt%2F%2B%3D\n"
                  "control:    " +
                  server.url() +
                  "/view/demo-1?token=ct (can click and type)\n"
                  "screenshot: " +
                  output.string() + "\n");
    EXPECT_TRUE(read_file(output) == demo.png());

    auto requests = server.requests();
    auto lines = lines_of(requests);
    ASSERT_GE(lines.size(), 8u);
    EXPECT_EQ(lines.front(), "POST /v1/sandboxes");
    EXPECT_EQ(requests.front().json_body().at("template"), "minimal");
    EXPECT_EQ(lines.back(), "DELETE /v1/sandboxes/demo-1");
    auto find = [&](const std::string& line) {
        return std::find(lines.begin(), lines.end(), line) - lines.begin();
    };
    // The state was polled until running, xterm started, then actions, then the screenshot.
    EXPECT_EQ(std::count(lines.begin(), lines.end(), "GET /v1/sandboxes/demo-1"), 2);
    auto commands = find("POST /v1/sandboxes/demo-1/commands");
    auto actions = find("POST /v1/sandboxes/demo-1/actions");
    auto screenshot = find("GET /v1/sandboxes/demo-1/screenshot");
    ASSERT_LT(commands, actions);
    ASSERT_LT(actions, screenshot);
    EXPECT_EQ(requests[commands].json_body(), json({{"argv", {"xterm"}}, {"background", true}}));
    json batch = requests[actions].json_body().at("actions");
    ASSERT_EQ(batch.size(), 4u);
    EXPECT_EQ(batch[0], json({{"type", "click"}, {"x", 300}, {"y", 200}}));  // the xterm's middle
    EXPECT_EQ(batch[1],
              json({{"type", "type"}, {"text", "echo \"Hello from deskbox — Grêmio 日本語\""}}));
    EXPECT_EQ(batch[2], json({{"type", "key"}, {"keys", "Return"}}));
    EXPECT_EQ(batch[3].at("type"), "wait");
    // Keep-alive: the whole demo went over one connection.
    EXPECT_EQ(server.connections(), 1);
    for (const auto& request : requests) EXPECT_EQ(request.connection, 1);
}

TEST_F(CliTest, DemoFallsBackToAnotherTerminal) {
    DemoServer demo(server, /*fail_actions=*/false, /*xterm_missing=*/true);
    fs::path output = temp.path() / "demo.png";
    RunResult result = run({"demo", "-o", output.string(), "--start-terminal-after", "0"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    std::vector<json> launched;
    for (const auto& request : server.requests()) {
        if (request.path.ends_with("/commands")) launched.push_back(request.json_body().at("argv"));
    }
    EXPECT_EQ(launched, (std::vector<json>{{"xterm"}, {"x-terminal-emulator"}}));
    EXPECT_NE(result.err.find("xterm: No such file or directory"), std::string::npos);
}

TEST_F(CliTest, DemoKeepLeavesTheSandbox) {
    DemoServer demo(server);
    fs::path output = temp.path() / "kept.png";
    RunResult result =
        run({"demo", "--keep", "-o", output.string(), "--start-terminal-after", "0"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    for (const auto& line : lines_of(server.requests()))
        EXPECT_NE(line, "DELETE /v1/sandboxes/demo-1");
    EXPECT_NE(result.err.find("deskbox kill demo-1"), std::string::npos);
}

TEST_F(CliTest, DemoFailureStillKillsTheSandbox) {
    DemoServer demo(server, /*fail_actions=*/true);
    fs::path output = temp.path() / "never.png";
    RunResult result = run({"demo", "-o", output.string(), "--start-terminal-after", "0"});
    EXPECT_EQ(result.status.exit_code, 1);
    EXPECT_NE(result.err.find("bad key"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("actions[2].keys"), std::string::npos) << result.err;
    EXPECT_EQ(lines_of(server.requests()).back(), "DELETE /v1/sandboxes/demo-1");
    EXPECT_FALSE(fs::exists(output));
}

// --- the client library --------------------------------------------------------------------

client::ClientOptions options_for(const std::string& url, const std::string& api_key = {}) {
    client::ClientOptions options;
    options.server = url;
    options.api_key = api_key;
    return options;
}

// --- templates -----------------------------------------------------------------------------

// deskboxd's template routes as the CLI sees them: uploads by id, one build "bld-1" whose log
// is served in `pieces` (one per request, from the offset asked) and whose end is `finished`.
struct FakeTemplates {
    std::map<std::string, std::string> uploads;
    std::vector<std::string> pieces;
    std::set<int> hang_ups;  // log requests (counted from 0) answered by closing the connection
    int log_requests = 0;
    json finished = {{"build_id", "bld-1"},
                     {"kind", "dockerfile"},
                     {"template", "demo:v2"},
                     {"status", "succeeded"},
                     {"step", 2},
                     {"steps", 2},
                     {"cached_steps", 1},
                     {"seconds", 12.5}};

    FakeAnswer operator()(const RecordedRequest& r) {
        if (r.method == "POST" && r.path == "/v1/templates/uploads") {
            const std::string id = "upl-" + std::to_string(uploads.size() + 1);
            uploads[id] = r.body;
            return json_answer({{"upload_id", id}, {"bytes", r.body.size()}}, 201);
        }
        if (r.method == "PUT" && r.path.starts_with("/v1/templates/uploads/")) {
            auto& upload = uploads[r.path.substr(22)];
            if (r.query.at("offset") != std::to_string(upload.size()))
                return error_answer(409, "conflict", "offset is not the upload's size", "offset");
            upload += r.body;
            return json_answer({{"upload_id", r.path.substr(22)}, {"bytes", upload.size()}});
        }
        if (r.method == "POST" &&
            (r.path == "/v1/templates/builds" || r.path == "/v1/templates/imports"))
            return json_answer(
                {{"build_id", "bld-1"}, {"template", finished["template"]}, {"status", "queued"}},
                202);
        if (r.method == "GET" && r.path == "/v1/templates/builds/bld-1/log") {
            if (hang_ups.count(log_requests++)) return FakeAnswer{0, "", "", {}, false, false};
            const auto offset = std::stoull(r.query.count("offset") ? r.query.at("offset") : "0");
            std::size_t at = 0, i = 0;
            while (i < pieces.size() && at < offset) at += pieces[i++].size();
            const std::string text = i < pieces.size() ? pieces[i] : "";
            return json_answer({{"offset", offset},
                                {"next_offset", offset + text.size()},
                                {"text", text},
                                {"complete", i + 1 >= pieces.size()},
                                {"status", finished["status"]}});
        }
        if (r.path == "/v1/templates/builds/bld-1" || r.path == "/v1/templates/builds/bld-1/cancel")
            return json_answer(finished);
        return error_answer(404, "not_found", "no route " + r.line());
    }
};

std::vector<std::string> tar_names(const fs::path& archive) {
    RunResult listing = run_process({"tar", "-tf", archive.string()});
    EXPECT_EQ(listing.status.exit_code, 0) << listing.err;
    std::vector<std::string> names;
    std::istringstream lines(listing.out);
    for (std::string line; std::getline(lines, line);) names.push_back(line);
    return names;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

class CliTemplateTest : public CliTest {
  protected:
    CliTemplateTest() {
        server.set_handler([this](const RecordedRequest& r) { return fake(r); });
    }
    std::vector<RecordedRequest> requests_to(const std::string& method, const std::string& path) {
        std::vector<RecordedRequest> out;
        for (auto& r : server.requests())
            if (r.method == method && r.path.starts_with(path)) out.push_back(r);
        return out;
    }
    FakeTemplates fake;
};

TEST_F(CliTemplateTest, BuildSendsTheContextInPartsHonoursDockerignoreAndStreamsTheLog) {
    const fs::path ctx = temp.path() / "ctx";
    fs::create_directories(ctx / "app");
    fs::create_directories(ctx / "secret");
    fs::create_directories(ctx / "build");
    write_file(ctx / "Dockerfile", "FROM deskbox/minimal\nCOPY . /app\n");
    write_file(ctx / ".dockerignore",
               "# what stays here\n*.log\nsecret\n!secret/ok.txt\n/build/\n");
    write_file(ctx / "app" / "main.txt", "main");
    write_file(ctx / "app" / "x.log", "kept: *.log is the top level only");
    write_file(ctx / "debug.log", "left out");
    write_file(ctx / "secret" / "key", "left out");
    write_file(ctx / "secret" / "ok.txt", "an exception");
    write_file(ctx / "build" / "out.o", "left out");
    const std::string blob = binary_blob((5 << 20) / 2);
    write_file(ctx / "big.bin", blob);
    fs::create_symlink("/etc/passwd", ctx / "link");  // sent as a link, never followed
    fake.pieces = {"STEP 1/2: FROM deskbox/minimal\n", "STEP 2/2: COPY . /app\n",
                   "deskbox: template demo:v2 is ready\n"};

    RunResult result = run({"template", "build", "demo:v2", ctx.string(), "--part-mb", "1",
                            "--build-arg", "A=1", "--build-arg", "B=two=2", "--start-cmd",
                            "xclock -digital", "--ready-cmd", "pgrep xclock", "--no-cache",
                            "--network", R"({"allow":["deb.debian.org"]})", "--timeout", "600"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(result.out, fake.pieces[0] + fake.pieces[1] + fake.pieces[2]);
    EXPECT_NE(result.err.find("left out by .dockerignore"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("built demo:v2 in 12.5 s (1 of 2 steps cached)"), std::string::npos)
        << result.err;

    // The parts: a POST, then PUTs at the offsets reached, 1 MiB each but the last.
    auto posts = requests_to("POST", "/v1/templates/uploads");
    auto puts = requests_to("PUT", "/v1/templates/uploads/");
    ASSERT_EQ(posts.size(), 1u);
    ASSERT_GE(puts.size(), 2u);
    EXPECT_EQ(posts[0].header("content-type"), "application/octet-stream");
    EXPECT_EQ(posts[0].body.size(), 1u << 20);
    for (std::size_t i = 0; i < puts.size(); ++i) {
        EXPECT_EQ(puts[i].path, "/v1/templates/uploads/upl-1");
        EXPECT_EQ(puts[i].query.at("offset"), std::to_string((i + 1) << 20));
    }
    const fs::path archive = temp.path() / "context.tar";
    write_file(archive, fake.uploads.at("upl-1"));
    auto names = tar_names(archive);
    for (const char* kept : {"./Dockerfile", "./.dockerignore", "./app/", "./app/main.txt",
                             "./app/x.log", "./secret/ok.txt", "./big.bin", "./link"})
        EXPECT_TRUE(contains(names, kept)) << kept;
    for (const char* left : {"./debug.log", "./secret/key", "./build/", "./build/out.o"})
        EXPECT_FALSE(contains(names, left)) << left;
    RunResult link = run_process({"tar", "-tvf", archive.string(), "./link"});
    EXPECT_NE(link.out.find("./link -> /etc/passwd"), std::string::npos) << link.out;
    RunResult big = run_process({"tar", "-xOf", archive.string(), "./big.bin"});
    EXPECT_TRUE(big.out == blob);

    auto builds = requests_to("POST", "/v1/templates/builds");
    ASSERT_EQ(builds.size(), 1u);
    EXPECT_EQ(builds[0].json_body(), json({{"name", "demo"},
                                           {"tag", "v2"},
                                           {"upload_id", "upl-1"},
                                           {"build_args", {{"A", "1"}, {"B", "two=2"}}},
                                           {"start_cmd", "xclock -digital"},
                                           {"ready_cmd", "pgrep xclock"},
                                           {"no_cache", true},
                                           {"network", {{"allow", {"deb.debian.org"}}}},
                                           {"timeout_s", 600}}));
    // The log is read from where the last piece ended.
    auto logs = requests_to("GET", "/v1/templates/builds/bld-1/log");
    ASSERT_EQ(logs.size(), 3u);
    EXPECT_EQ(logs[1].query.at("offset"), std::to_string(fake.pieces[0].size()));
    EXPECT_EQ(logs[0].query.at("wait_s"), "5");
}

TEST_F(CliTemplateTest, TheLogResumesWhereItStoppedAfterADroppedConnection) {
    write_file(temp.path() / "Dockerfile", "FROM deskbox/minimal\n");
    fake.pieces = {"STEP 1/1: FROM deskbox/minimal\n", "deskbox: template demo:v2 is ready\n"};
    fake.hang_ups = {1, 2};  // the client's own retry on a fresh connection is dropped too
    RunResult result = run({"template", "build", "demo:v2", temp.path().string()});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(result.out, fake.pieces[0] + fake.pieces[1]);  // each byte once
    const std::string after = std::to_string(fake.pieces[0].size());
    EXPECT_NE(result.err.find("retrying from byte " + after), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("reconnected; the log goes on from byte " + after), std::string::npos)
        << result.err;
    auto logs = requests_to("GET", "/v1/templates/builds/bld-1/log");
    ASSERT_GE(logs.size(), 4u);
    for (std::size_t i = 1; i < logs.size(); ++i) EXPECT_EQ(logs[i].query.at("offset"), after);
}

TEST_F(CliTemplateTest, AFailedBuildNamesItsStepAndExitCode) {
    const fs::path ctx = temp.path() / "ctx";
    fs::create_directories(ctx / "docker");
    write_file(ctx / ".dockerignore", "docker\n");
    write_file(ctx / "docker" / "Dockerfile.dev", "FROM deskbox/minimal\nRUN exit 3\n");
    write_file(temp.path() / "Dockerfile.outside", "FROM deskbox/minimal\nRUN exit 3\n");
    fake.pieces = {"STEP 1/2: FROM deskbox/minimal\nSTEP 2/2: RUN exit 3\n"};
    fake.finished["status"] = "failed";
    fake.finished["error"] = {{"code", "step_failed"},
                              {"message", "step 2 (RUN exit 3) failed with exit code 3"},
                              {"step", 2},
                              {"instruction", "RUN exit 3"},
                              {"exit_code", 3},
                              {"log_tail", "STEP 2/2: RUN exit 3\nexit status 3\n"}};

    // -f inside the context: its path there (sent even though .dockerignore leaves docker/ out).
    RunResult inside = run({"template", "build", "demo", "-f",
                            (ctx / "docker" / "Dockerfile.dev").string(), ctx.string()});
    EXPECT_EQ(inside.status.exit_code, 1);
    EXPECT_EQ(inside.out, fake.pieces[0]);
    EXPECT_NE(inside.err.find("step 2 (RUN exit 3) failed with exit code 3 [step_failed]"),
              std::string::npos)
        << inside.err;
    EXPECT_NE(inside.err.find("failing step: 2/2 RUN exit 3\n"), std::string::npos) << inside.err;
    EXPECT_NE(inside.err.find("exit code: 3\n"), std::string::npos) << inside.err;
    EXPECT_EQ(inside.err.find("exit status 3"), std::string::npos) << "the log was printed";
    auto builds = requests_to("POST", "/v1/templates/builds");
    ASSERT_EQ(builds.size(), 1u);
    EXPECT_EQ(builds[0].json_body().value("dockerfile_path", ""), "docker/Dockerfile.dev");
    EXPECT_FALSE(builds[0].json_body().contains("dockerfile"));
    const fs::path archive = temp.path() / "context.tar";
    write_file(archive, fake.uploads.at("upl-1"));
    EXPECT_TRUE(contains(tar_names(archive), "./docker/Dockerfile.dev"));

    // -f outside: the text; -q: no log, so the log's end comes with the error.
    RunResult outside = run({"template", "build", "demo", "-q", "-f",
                             (temp.path() / "Dockerfile.outside").string(), ctx.string()});
    EXPECT_EQ(outside.status.exit_code, 1);
    EXPECT_EQ(outside.out, "");
    EXPECT_NE(outside.err.find("exit code: 3\n"), std::string::npos) << outside.err;
    EXPECT_NE(outside.err.find("the log's end:\nSTEP 2/2: RUN exit 3\nexit status 3\n"),
              std::string::npos)
        << outside.err;
    builds = requests_to("POST", "/v1/templates/builds");
    ASSERT_EQ(builds.size(), 2u);
    EXPECT_EQ(builds[1].json_body().value("dockerfile", ""), "FROM deskbox/minimal\nRUN exit 3\n");
    EXPECT_FALSE(builds[1].json_body().contains("dockerfile_path"));

    // logs -f of a failed build exits as the build did.
    RunResult logs = run({"template", "logs", "bld-1", "-f"});
    EXPECT_EQ(logs.status.exit_code, 1);
    EXPECT_EQ(logs.out, fake.pieces[0]);
}

TEST_F(CliTemplateTest, ImportFromStdinAndDetach) {
    const std::string archive = binary_blob(300000);
    fake.finished["template"] = "img:1";
    RunResult result =
        run({"template", "import", "img:1", "-", "--format", "oci-archive", "-d"}, archive);
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(result.out, "bld-1\n");
    EXPECT_TRUE(fake.uploads.at("upl-1") == archive);
    auto imports = requests_to("POST", "/v1/templates/imports");
    ASSERT_EQ(imports.size(), 1u);
    EXPECT_EQ(
        imports[0].json_body(),
        json({{"name", "img"}, {"tag", "1"}, {"format", "oci-archive"}, {"upload_id", "upl-1"}}));
    EXPECT_TRUE(requests_to("GET", "/v1/templates/builds/bld-1/log").empty());

    RunResult bad = run({"template", "import", "img", "x.tar", "--format", "zip"});
    EXPECT_EQ(bad.status.exit_code, 2);
}

// --image: nothing is uploaded, the server pulls the image from its registry.
TEST_F(CliTemplateTest, ImportByReferenceUploadsNothing) {
    fake.finished["template"] = "app:1";
    RunResult result =
        run({"template", "import", "app:1", "--image", "reg.example:5000/team/app:1", "-d"});
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(result.out, "bld-1\n");
    EXPECT_TRUE(requests_to("POST", "/v1/templates/uploads").empty());
    auto imports = requests_to("POST", "/v1/templates/imports");
    ASSERT_EQ(imports.size(), 1u);
    EXPECT_EQ(imports[0].json_body(),
              json({{"name", "app"}, {"tag", "1"}, {"image", "reg.example:5000/team/app:1"}}));
    // An image and a file, or an image with an archive's format: usage errors.
    EXPECT_EQ(
        run({"template", "import", "app", "x.tar", "--image", "reg.example/a"}).status.exit_code,
        2);
    EXPECT_EQ(
        run({"template", "import", "app", "--image", "reg.example/a", "--format", "oci-archive"})
            .status.exit_code,
        2);
}

TEST_F(CliTemplateTest, LsRmLogsCancelAndUsage) {
    server.set_handler([this](const RecordedRequest& r) {
        if (r.line() == "GET /v1/templates")
            return json_answer({{"templates", {"minimal", "demo:v2"}},
                                {"items",
                                 {{{"template", "minimal"},
                                   {"kind", "shipped"},
                                   {"runtimes", {"container", "microvm"}}},
                                  {{"template", "demo:v2"},
                                   {"kind", "user"},
                                   {"bytes", 3u << 20},
                                   {"created_at", "2026-12-05T14:13:23Z"},
                                   {"runtimes", {"container"}}}}}});
        if (r.method == "DELETE")
            return r.path == "/v1/templates/demo%3Av2"
                       ? json_answer({{"deleted", "demo:v2"}})
                       : error_answer(404, "not_found", "no template 'gone:latest'", "name");
        return fake(r);
    });
    RunResult ls = run({"template", "ls"});
    ASSERT_EQ(ls.status.exit_code, 0) << ls.err;
    EXPECT_EQ(ls.out,
              "TEMPLATE  KIND     SIZE     BUILT                 RUNTIMES\n"
              "minimal   shipped  -        -                     container,microvm\n"
              "demo:v2   user     3.0 MiB  2026-12-05T14:13:23Z  container\n");

    RunResult rm = run({"template", "rm", "demo:v2", "gone"});
    EXPECT_EQ(rm.status.exit_code, 1);
    EXPECT_EQ(rm.out, "demo:v2\n");
    EXPECT_NE(rm.err.find("gone: no template 'gone:latest'"), std::string::npos) << rm.err;

    fake.pieces = {"one\n", "two"};
    RunResult logs = run({"template", "logs", "bld-1"});
    EXPECT_EQ(logs.status.exit_code, 0) << logs.err;
    EXPECT_EQ(logs.out, "one\ntwo\n");

    fake.finished["status"] = "cancelled";
    RunResult cancel = run({"template", "cancel", "bld-1"});
    EXPECT_EQ(cancel.status.exit_code, 0) << cancel.err;
    EXPECT_EQ(cancel.out, "bld-1\tcancelled\n");
    EXPECT_EQ(requests_to("POST", "/v1/templates/builds/bld-1/cancel").size(), 1u);

    const auto before = server.requests().size();
    for (std::vector<std::string> bad : {std::vector<std::string>{"template"},
                                         {"template", "frob"},
                                         {"template", "build"},
                                         {"template", "build", "x", "/nonexistent-dir"},
                                         {"template", "build", "x", ".", "--network", "{nope"},
                                         {"template", "build", "x", ".", "--part-mb", "0"},
                                         {"template", "logs"}}) {
        RunResult r = run(bad);
        EXPECT_EQ(r.status.exit_code, 2) << bad.back() << ": " << r.err;
    }
    EXPECT_EQ(server.requests().size(), before);
    RunResult help = run({"template", "--help"});
    EXPECT_EQ(help.status.exit_code, 0);
    EXPECT_NE(help.out.find("deskbox template build NAME[:TAG]"), std::string::npos);
}

TEST(ApiClientLibrary, ParsesServerUrls) {
    auto url = client::parse_server_url("http://127.0.0.1:8700");
    EXPECT_EQ(url.host, "127.0.0.1");
    EXPECT_EQ(url.port, "8700");
    EXPECT_EQ(url.base_path, "");
    auto with_path = client::parse_server_url("HTTP://[::1]:9000/deskbox/");
    EXPECT_EQ(with_path.host, "::1");
    EXPECT_EQ(with_path.base_path, "/deskbox");
    EXPECT_EQ(with_path.to_string(), "http://[::1]:9000/deskbox");
    EXPECT_EQ(client::parse_server_url("example.com").port, "80");
    for (const char* bad : {"https://x", "ftp://x", "http://:80", "http://x:0", "http://x:99999",
                            "http://x:80?q", "http://u@x", "http://[::1"}) {
        EXPECT_THROW(client::parse_server_url(bad), std::invalid_argument) << bad;
    }
}

TEST(ApiClientLibrary, EncodesQueries) {
    EXPECT_EQ(client::percent_encode("a b/ü&=?"), "a%20b%2F%C3%BC%26%3D%3F");
    EXPECT_EQ(client::Query().add("path", "/a b/&x").add("q", "1").str(), "?path=/a%20b/%26x&q=1");
    EXPECT_EQ(client::Query().str(), "");
}

TEST(ApiClientLibrary, ReusesOneConnection) {
    FakeServer server;
    server.set_handler([](const RecordedRequest& request) {
        return json_answer({{"echo", request.path}});
    });
    client::ApiClient api(options_for(server.url()));
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(api.get_json("/v1/n" + std::to_string(i)).at("echo"),
                  "/v1/n" + std::to_string(i));
    }
    EXPECT_EQ(api.post_json("/v1/p", {{"a", 1}}).at("echo"), "/v1/p");
    EXPECT_EQ(api.connections_opened(), 1u);
    EXPECT_EQ(server.connections(), 1);
    EXPECT_EQ(server.requests().back().json_body(), json({{"a", 1}}));
}

TEST(ApiClientLibrary, ReconnectsWhenTheServerCloses) {
    FakeServer server;
    std::atomic<int> count = 0;
    server.set_handler([&](const RecordedRequest&) {
        FakeAnswer answer = json_answer({{"n", ++count}});
        // First answer says "Connection: close"; the second closes silently (an idle timeout).
        answer.close = count == 1;
        answer.drop_after = count == 2;
        return answer;
    });
    client::ApiClient api(options_for(server.url()));
    EXPECT_EQ(api.get_json("/a").at("n"), 1);
    EXPECT_EQ(api.get_json("/b").at("n"), 2);
    EXPECT_EQ(api.get_json("/c").at("n"), 3);
    EXPECT_EQ(server.connections(), 3);
    EXPECT_EQ(api.connections_opened(), 3u);
}

TEST(ApiClientLibrary, ErrorAnswersBecomeTypedExceptions) {
    FakeServer server;
    server.set_handler([](const RecordedRequest&) {
        return error_answer(422, "invalid_action", "x: out of screen", "actions[0].x");
    });
    client::ApiClient api(options_for(server.url(), "k"));
    try {
        api.post_json("/v1/sandboxes/s/actions", {{"type", "click"}});
        FAIL() << "no exception";
    } catch (const client::ApiError& error) {
        EXPECT_EQ(error.status(), 422u);
        EXPECT_EQ(error.code(), "invalid_action");
        EXPECT_EQ(error.message(), "x: out of screen");
        EXPECT_EQ(error.field(), "actions[0].x");
    }
    EXPECT_EQ(server.requests().at(0).header("authorization"), "Bearer k");
    // send() hands back any status without throwing; the connection stays usable.
    client::Response raw = api.send(client::Method::get, "/x");
    EXPECT_EQ(raw.status, 422u);
    EXPECT_EQ(raw.header("CONTENT-TYPE"), "application/json");
    EXPECT_EQ(server.connections(), 1);
}

TEST(ApiClientLibrary, ABodyRefusedFromItsHeaderGivesTheServersAnswer) {
    // As deskboxd refuses a body over --max-body-mb: it answers 413 on the header and closes
    // without reading the body, so the client's write fails half way.
    asio::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    std::thread refuser([&] {
        tcp::socket socket(io);
        acceptor.accept(socket);
        std::string head;
        char c;
        while (head.find("\r\n\r\n") == std::string::npos &&
               asio::read(socket, asio::buffer(&c, 1)))
            head += c;
        const std::string body =
            R"({"error":{"code":"payload_too_large","message":"request body is over this )"
            R"(endpoint's limit of 1048576 bytes"}})";
        asio::write(socket, asio::buffer("HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n"
                                         "Content-Type: application/json\r\nContent-Length: " +
                                         std::to_string(body.size()) + "\r\n\r\n" + body));
        socket.close();
    });
    client::ApiClient api(
        options_for("http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port())));
    try {
        api.put_bytes("/v1/templates/uploads/upl-1?offset=0", std::string(16 << 20, 'x'));
        ADD_FAILURE() << "no exception";
    } catch (const client::ApiError& error) {
        EXPECT_EQ(error.status(), 413u);
        EXPECT_EQ(error.code(), "payload_too_large");
    } catch (const std::exception& error) {
        ADD_FAILURE() << "not the server's answer: " << error.what();
    }
    refuser.join();
}

TEST(ApiClientLibrary, ASilentServerTimesOut) {
    // Listening but never accepting: the kernel completes the handshake, nobody answers.
    asio::io_context io;
    tcp::acceptor silent(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    silent.listen();
    std::string url = "http://127.0.0.1:" + std::to_string(silent.local_endpoint().port());
    client::ClientOptions options = options_for(url);
    options.request_timeout = 300ms;
    client::ApiClient api(options);
    try {
        api.get_json("/healthz");
        FAIL() << "no exception";
    } catch (const client::ConnectionError& error) {
        EXPECT_FALSE(error.refused());
        EXPECT_NE(std::string(error.what()).find("did not answer within 300 ms"), std::string::npos)
            << error.what();
    }
}

}  // namespace
}  // namespace deskbox
