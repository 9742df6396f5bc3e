// libFuzzer target for deskboxd's HTTP surface: request bytes -> Beast's request parser (with
// deskboxd's header limit) -> ApiRouter -> validation, against a SandboxManager whose only
// runtime is a FakeRuntime, so one sandbox is there to aim at without a guest.
// In an input, "sb-fuzz" stands for that sandbox's id, "tok-fuzz" for its control token and
// "mcp-fuzz" for an open MCP session. Invariants, for every request:
//   - no crash, no sanitizer report, no exception out of the router;
//   - no 500: a 5xx may only be the fake agent refusing (502), an agent timeout (504) or an
//     agent or server at capacity (503), never the server failing on what a client sent;
//   - every 4xx/5xx is JSON with error.code and error.message (JSON-RPC's on /mcp);
//   - every JSON answer parses strictly (so it is valid UTF-8).
// Not fuzzed here: WebSocket upgrades and exposed ports (they take the connection; the
// router answers 400 no_connection), and /wait and actions with a target, which wait for the
// screen by design (bounded by their timeout_ms, covered by analysis_api_test). The seed
// corpus (corpus/) is replayed by http_corpus_tests.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "server/api/api_router.hpp"
#include "server/api/api_routes.hpp"
#include "server/api/http_util.hpp"
#include "server/runtime/fake_runtime.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "tests/support/fake_sandbox_manager.hpp"

namespace {

namespace http = boost::beast::http;
using nlohmann::json;
using namespace deskbox;

[[noreturn]] void broken(const std::string& what, const std::string& request,
                         const server::HttpResponse& response) {
    std::fprintf(stderr, "HTTP invariant broken: %s\n--- request\n%s\n--- answer %u\n%s\n",
                 what.c_str(), request.substr(0, 2000).c_str(), response.result_int(),
                 response.body().substr(0, 2000).c_str());
    std::abort();
}

struct Harness {
    runtime::FakeTemplate images;
    std::unique_ptr<server::SandboxManager> manager;
    std::unique_ptr<server::ApiRouter> router;

    Harness() {
        manager = test::make_fake_sandbox_manager(
            images,
            [](server::ManagerOptions& o) {
                o.max_sandboxes = 1;  // a create that passes validation meets 429 while one runs
                o.agent_timeout = std::chrono::seconds(5);
            },
            runtime::NetworkAttach::netns);  // exposed ports reach a real container network
        router = std::make_unique<server::ApiRouter>(*manager, server::ApiOptions{});
    }

    // The sandbox inputs aim at: the running one, else a new one (the last input may have
    // killed, paused or timed it out).
    std::shared_ptr<server::Sandbox> target() {
        for (const auto& sandbox : manager->list())
            if (sandbox->status() == server::SandboxStatus::running) return sandbox;
        for (const auto& sandbox : manager->list()) manager->kill(sandbox->id());
        return manager->create(json::object());
    }

    // An MCP session for inputs to use ("mcp-fuzz"), opened once.
    std::string mcp_session() {
        if (!mcp_session_id.empty()) return mcp_session_id;
        server::HttpRequest init{http::verb::post, "/mcp", 11};
        init.set(http::field::content_type, "application/json");
        init.set(http::field::accept, "application/json, text/event-stream");
        init.body() = json{{"jsonrpc", "2.0"},
                           {"id", 0},
                           {"method", "initialize"},
                           {"params",
                            {{"protocolVersion", "2025-06-18"},
                             {"capabilities", json::object()},
                             {"clientInfo", {{"name", "fuzz"}, {"version", "1"}}}}}}
                          .dump();
        init.prepare_payload();
        server::HttpExchange exchange{init, nullptr};
        mcp_session_id = std::string(router->handle(exchange)["Mcp-Session-Id"]);
        return mcp_session_id;
    }
    std::string mcp_session_id;
};

void replace_all(std::string& text, std::string_view placeholder, const std::string& value) {
    for (std::size_t at = 0; (at = text.find(placeholder, at)) != std::string::npos;) {
        text.replace(at, placeholder.size(), value);
        at += value.size();
    }
}

Harness& harness() {
    static Harness h;
    return h;
}

void check_answer(const std::string& request_text, bool mcp, const server::HttpResponse& res) {
    const unsigned status = res.result_int();
    if (status >= 500 && status != 502 && status != 503 && status != 504)
        broken("a " + std::to_string(status) + " answer", request_text, res);
    const bool is_json = res[http::field::content_type].starts_with("application/json");
    json body;
    if (is_json || status >= 400) {
        try {
            body = json::parse(res.body());
        } catch (const json::exception& e) {
            broken(std::string("answer is not JSON: ") + e.what(), request_text, res);
        }
    }
    if (status < 400) return;
    const json* error = body.is_object() && body.contains("error") ? &body["error"] : nullptr;
    if (!error || !error->is_object() || !error->contains("message") ||
        !(*error)["message"].is_string())
        broken("error without error.message", request_text, res);
    const json& code = (*error)["code"];
    if (mcp ? !code.is_number_integer() : !code.is_string())
        broken("error without error.code", request_text, res);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size > (1u << 20)) return 0;
    Harness& h = harness();
    std::string text(reinterpret_cast<const char*>(data), size);

    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(server::HttpOptions{}.max_header_bytes));
    parser.body_limit(1u << 20);  // the fuzzer's inputs are smaller than deskboxd's limit
    parser.eager(true);
    boost::beast::error_code ec;
    std::size_t used = 0;
    while (used < text.size() && !parser.is_done()) {
        used += parser.put(boost::asio::buffer(text.data() + used, text.size() - used), ec);
        if (ec == http::error::need_more) {
            ec = {};
            break;
        }
        if (ec) return 0;  // the server answers 400/413/431 before any routing
    }
    if (!parser.is_done()) parser.put_eof(ec);
    if (ec || !parser.is_done()) return 0;
    server::HttpRequest request = parser.release();
    // The placeholders are filled in after parsing, so a body keeps its Content-Length right.
    const auto sandbox = h.target();
    const std::string session = h.mcp_session();
    auto fill = [&](std::string value) {
        replace_all(value, "sb-fuzz", sandbox->id());
        replace_all(value, "tok-fuzz", sandbox->control_token());
        replace_all(value, "mcp-fuzz", session);
        return value;
    };
    request.target(fill(std::string(request.target())));
    std::vector<std::pair<std::string, std::string>> filled;
    for (const auto& field : request)
        if (std::string value(field.value()), done = fill(value); done != value)
            filled.emplace_back(std::string(field.name_string()), std::move(done));
    for (const auto& [name, value] : filled) request.set(name, value);
    request.body() = fill(std::move(request.body()));
    if (request.has_content_length()) request.content_length(request.body().size());

    const std::string target(request.target());
    const bool waits = target.find("/wait") != std::string::npos ||
                       (target.find("/actions") != std::string::npos &&
                        request.body().find("\"target\"") != std::string::npos) ||
                       request.body().find("wait_for") != std::string::npos ||
                       request.body().find("find_on_screen") != std::string::npos;
    if (waits) return 0;
    bool mcp = false;  // as the router decides it: the decoded path is /mcp's route
    try {
        const auto route =
            server::match_api_route(server::url_decode(target.substr(0, target.find('?')), false));
        mcp = route && route.route->path == "/mcp";
    } catch (const std::exception&) {
    }

    server::HttpExchange exchange{request, nullptr};
    server::HttpResponse response;
    try {
        response = h.router->handle(exchange);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "HTTP invariant broken: the router threw %s\n%s\n", e.what(),
                     text.substr(0, 2000).c_str());
        std::abort();
    }
    check_answer(text, mcp, response);
    static const bool log = std::getenv("DESKBOX_HTTP_FUZZ_LOG") != nullptr;
    if (log)  // what each input got, to see that seeds reach what they are meant for
        std::fprintf(stderr, "%u %s %s\n", response.result_int(), target.substr(0, 80).c_str(),
                     response.body().substr(0, 160).c_str());
    return 0;
}
