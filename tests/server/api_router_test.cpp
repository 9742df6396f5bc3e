// ApiRouter without root and without a guest: sandboxes of a FakeRuntime (an in-process agent
// that answers screen.sync and refuses the rest), requests handed to the router in-process, and
// once through a real HttpServer for its body limit. Covers the route table itself, 404/405,
// credentials, a sandbox's create -> inspect -> list -> delete, and each resource's 400s.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "common/version.hpp"
#include "server/api/api_router.hpp"
#include "server/api/api_routes.hpp"
#include "server/api/auth.hpp"
#include "server/api/http_util.hpp"
#include "tests/support/fake_sandbox_manager.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

// A template with its variables filled in.
std::string instantiate(std::string_view path, const std::string& id) {
    std::string target(path);
    for (auto [from, to] : {std::pair<std::string, std::string>{"{id}", id},
                            {"{port}", "8080"},
                            {"{path}", "app/x"},
                            {"{name}", "viewer.js"}})
        if (auto at = target.find(from); at != std::string::npos)
            target.replace(at, from.size(), to);
    return target;
}

TEST(RouteTable, EveryMethodHasAHandlerAndEveryRouteIsReachable) {
    std::set<std::string_view> paths;
    for (const auto& route : api_routes()) {
        SCOPED_TRACE(std::string(route.path));
        EXPECT_TRUE(paths.insert(route.path).second) << "listed twice";
        ASSERT_FALSE(route.methods.empty());
        std::set<http::verb> verbs;
        for (const auto& method : route.methods) {
            EXPECT_NE(method.handler, nullptr) << http::to_string(method.verb);
            EXPECT_TRUE(verbs.insert(method.verb).second) << "method listed twice";
            EXPECT_EQ(route.handler_for(method.verb), method.handler);
        }
        // No earlier template shadows this one: its own instance reaches it, with its variables.
        const std::string target = instantiate(route.path, "sb-1");
        auto match = match_api_route(target);
        ASSERT_TRUE(match) << target;
        EXPECT_EQ(match.route, &route) << target << " went to " << match.route->path;
        if (route.path.find("{id}") != std::string_view::npos) {
            EXPECT_EQ(match.params["id"], "sb-1");
        }
        if (route.path.find("{path}") != std::string_view::npos) {
            EXPECT_EQ(match.params["path"], "app/x");
        }
        // Per-sandbox routes are the ones under /v1/sandboxes/{id} and /view/{id} but a
        // sandbox's metrics, which outlive it (the usage ledger answers them); a token route
        // always has a sandbox to check the token against.
        EXPECT_EQ(route.per_sandbox(), (route.path.starts_with("/v1/sandboxes/{id}") ||
                                        route.path.starts_with("/view/{id}")) &&
                                           route.path != "/v1/sandboxes/{id}/metrics");
        if (route.auth == RouteAuth::sandbox_token) {
            EXPECT_TRUE(route.per_sandbox());
        }
        // A method the route does not list has no handler, unless the route relays as sent.
        if (!verbs.count(http::verb::trace)) {
            EXPECT_EQ(route.handler_for(http::verb::trace) != nullptr, route.as_sent);
        }
    }
    EXPECT_FALSE(match_api_route("/v1/recordings/r1").route->per_sandbox())
        << "a recording's id is not a sandbox's";
    const auto relayed = std::count_if(api_routes().begin(), api_routes().end(),
                                       [](const ApiRoute& r) { return r.as_sent; });
    EXPECT_EQ(relayed, 1) << "only exposed ports are relayed as sent";
}

TEST(RouteTable, MatchingIgnoresOneTrailingSlashAndNeedsEverySegment) {
    EXPECT_EQ(match_api_route("/v1/sandboxes/").route->path, "/v1/sandboxes");
    EXPECT_EQ(match_api_route("/v1/sandboxes/a/files/").route->path, "/v1/sandboxes/{id}/files");
    EXPECT_EQ(match_api_route("/index.html").route->path, "/");
    auto deep = match_api_route("/v1/sandboxes/a/ports/3000/static/app.js");
    ASSERT_TRUE(deep);
    EXPECT_EQ(deep.params["port"], "3000");
    EXPECT_EQ(deep.params["path"], "static/app.js");
    EXPECT_EQ(match_api_route("/v1/sandboxes/a/ports/3000").params["path"], "");
    for (const char* unknown : {"", "v1/sandboxes", "/v1/sandboxes//files", "/v1/sandboxes/a/b",
                                "/v1/sandboxes/a/files//", "/view", "/assets/a/b", "/v2/x"})
        EXPECT_FALSE(match_api_route(unknown)) << unknown;
}

class RouterTest : public ::testing::Test {
  protected:
    void SetUp() override { manager_ = test::make_fake_sandbox_manager(images_); }
    void use_options(ApiOptions options) {
        router_ = std::make_unique<ApiRouter>(*manager_, std::move(options));
    }
    ApiRouter& router() {
        if (!router_) use_options({});
        return *router_;
    }
    HttpResponse call(http::verb method, const std::string& target, const std::string& body = {},
                      const std::vector<std::pair<std::string, std::string>>& headers = {}) {
        HttpRequest request{method, target, 11};
        for (const auto& [name, value] : headers) request.set(name, value);
        request.body() = body;
        request.prepare_payload();
        HttpExchange exchange{request, nullptr};
        return router().handle(exchange);
    }
    static json error(const HttpResponse& res) {
        return json::parse(res.body()).value("error", json::object());
    }
    // A new fake sandbox: its id, view and control tokens.
    json create() {
        auto created = call(http::verb::post, "/v1/sandboxes", "{}", key_header());
        EXPECT_EQ(created.result_int(), 201u) << created.body();
        return json::parse(created.body());
    }
    std::vector<std::pair<std::string, std::string>> key_header() const {
        if (key_.empty()) return {};
        return {{"Authorization", "Bearer " + key_}};
    }

    runtime::FakeTemplate images_;
    std::unique_ptr<SandboxManager> manager_;
    std::unique_ptr<ApiRouter> router_;
    std::string key_;
};

TEST_F(RouterTest, UnknownPathsAre404AndUnlistedMethods405WithAllow) {
    auto res = call(http::verb::get, "/v1/nothing/here");
    EXPECT_EQ(res.result_int(), 404u);
    EXPECT_EQ(error(res)["code"], "not_found");
    EXPECT_EQ(error(res)["message"], "no such endpoint: /v1/nothing/here");

    res = call(http::verb::put, "/v1/sandboxes");
    EXPECT_EQ(res.result_int(), 405u);
    EXPECT_EQ(error(res)["code"], "method_not_allowed");
    EXPECT_EQ(error(res)["message"], "PUT is not allowed on /v1/sandboxes (allowed: GET, POST)");
    EXPECT_EQ(res[http::field::allow], "GET, POST");

    // The method is refused before the sandbox is looked up.
    res = call(http::verb::post, "/v1/sandboxes/sb-none/screenshot");
    EXPECT_EQ(res.result_int(), 405u) << res.body();
    EXPECT_EQ(res[http::field::allow], "GET");

    // /mcp's clients read JSON-RPC: its 405 is one, the API's code in error.data.
    res = call(http::verb::put, "/mcp");
    EXPECT_EQ(res.result_int(), 405u);
    json rpc = json::parse(res.body());
    EXPECT_TRUE(rpc["error"]["code"].is_number_integer()) << rpc;
    EXPECT_EQ(rpc["error"]["data"]["code"], "method_not_allowed") << rpc;
    EXPECT_EQ(res[http::field::allow], "POST, GET, DELETE");

    res = call(http::verb::get, "/v1/sandboxes/x/screenshot%zz");
    EXPECT_EQ(res.result_int(), 400u);
    EXPECT_EQ(error(res)["code"], "bad_request");
}

TEST_F(RouterTest, CreateInspectListDelete) {
    json created = create();
    const std::string id = created["id"];
    EXPECT_EQ(created["state"], "running");
    EXPECT_FALSE(created["view_token"].get<std::string>().empty());
    EXPECT_FALSE(created["control_token"].get<std::string>().empty());

    auto inspect = call(http::verb::get, "/v1/sandboxes/" + id);
    ASSERT_EQ(inspect.result_int(), 200u) << inspect.body();
    json described = json::parse(inspect.body());
    EXPECT_EQ(described["id"], id);
    EXPECT_EQ(described["control_token"], created["control_token"]);
    EXPECT_TRUE(described["ports"].is_null()) << "the fake agent cannot list ports";
    // The trailing slash is the same route.
    EXPECT_EQ(call(http::verb::get, "/v1/sandboxes/" + id + "/").result_int(), 200u);

    auto list = json::parse(call(http::verb::get, "/v1/sandboxes/").body());
    ASSERT_EQ(list["sandboxes"].size(), 1u) << list;
    EXPECT_EQ(list["sandboxes"][0]["id"], id);
    EXPECT_FALSE(list["sandboxes"][0].contains("control_token")) << "tokens only on inspect";

    auto killed = call(http::verb::delete_, "/v1/sandboxes/" + id);
    ASSERT_EQ(killed.result_int(), 200u) << killed.body();
    // Like pause, resume and inspect: the sandbox object (as it ended), without tokens.
    const json ended = json::parse(killed.body());
    EXPECT_EQ(ended["id"], id);
    EXPECT_EQ(ended["state"], "killed");
    EXPECT_EQ(ended["template"], described["template"]);
    EXPECT_EQ(ended["created_at"], described["created_at"]);
    EXPECT_FALSE(ended.contains("control_token")) << ended;
    EXPECT_TRUE(manager_->list().empty());
    for (auto method : {http::verb::get, http::verb::delete_}) {
        auto gone = call(method, "/v1/sandboxes/" + id);
        EXPECT_EQ(gone.result_int(), 404u);
        EXPECT_EQ(error(gone)["field"], "id");
        EXPECT_EQ(error(gone)["message"], "no sandbox '" + id + "'");
    }
    EXPECT_EQ(json::parse(call(http::verb::get, "/v1/sandboxes").body())["sandboxes"].size(), 0u);
}

TEST_F(RouterTest, ApiKeysOpenTheApiAndTokensOpenOnlyTheirSandbox) {
    key_ = "k-secret";
    use_options({{key_}, {}});
    json sandbox = create();
    const std::string base = "/v1/sandboxes/" + sandbox["id"].get<std::string>();
    const std::string view = sandbox["view_token"], control = sandbox["control_token"];

    auto res = call(http::verb::get, "/v1/sandboxes");
    EXPECT_EQ(res.result_int(), 401u);
    EXPECT_EQ(error(res)["code"], "unauthorized");
    EXPECT_EQ(
        call(http::verb::get, "/v1/sandboxes", {}, {{"Authorization", "Bearer nope"}}).result_int(),
        401u);
    EXPECT_EQ(call(http::verb::get, "/v1/sandboxes", {}, key_header()).result_int(), 200u);
    EXPECT_EQ(call(http::verb::get, "/v1/sandboxes", {}, {{"X-API-Key", key_}}).result_int(), 200u);
    EXPECT_EQ(call(http::verb::get, "/v1/sandboxes?key=" + key_).result_int(), 200u);
    // The key is checked before the sandbox is looked up: no one learns which ids exist.
    EXPECT_EQ(call(http::verb::get, "/v1/sandboxes/sb-none").result_int(), 401u);
    // A sandbox's own tokens do not open the API.
    for (const auto& token : {view, control})
        EXPECT_EQ(
            call(http::verb::get, base, {}, {{"Authorization", "Bearer " + token}}).result_int(),
            401u);
    // Open without a key: health, the OpenAPI document, the dashboard and its assets.
    for (const char* open : {"/healthz", "/v1/openapi.json", "/", "/assets/viewer.js"})
        EXPECT_EQ(call(http::verb::get, open).result_int(), 200u) << open;
    EXPECT_EQ(call(http::verb::get, "/metrics").result_int(), 401u);

    // The viewer page takes the view or control token, or the key; the stream too (then it
    // wants a WebSocket: 426 shows the credentials passed).
    EXPECT_EQ(call(http::verb::get, "/view/" + sandbox["id"].get<std::string>()).result_int(),
              401u);
    for (const auto& token : {view, control}) {
        EXPECT_EQ(
            call(http::verb::get, "/view/" + sandbox["id"].get<std::string>() + "?token=" + token)
                .result_int(),
            200u);
        EXPECT_EQ(call(http::verb::get, base + "/stream?token=" + token).result_int(), 426u);
    }
    EXPECT_EQ(call(http::verb::get, base + "/stream?token=wrong").result_int(), 401u);
    EXPECT_EQ(call(http::verb::get, base + "/stream", {}, key_header()).result_int(), 426u);

    // Exposed ports take the control token, not the view token.
    res = call(http::verb::get, base + "/ports/8080/", {}, {{"Authorization", "Bearer " + view}});
    EXPECT_EQ(res.result_int(), 401u) << res.body();
    res =
        call(http::verb::get, base + "/ports/8080/", {}, {{"Authorization", "Bearer " + control}});
    // Past the credentials: a fake sandbox without a network namespace has no ports to reach.
    EXPECT_EQ(error(res)["code"], "port_unreachable") << res.body();
}

TEST_F(RouterTest, WithoutAClusterTheServerListsItselfAsItsOneNode) {
    create();
    auto res = call(http::verb::get, "/v1/nodes");
    ASSERT_EQ(res.result_int(), 200u) << res.body();
    json nodes = json::parse(res.body());
    EXPECT_EQ(nodes["clustered"], false);
    ASSERT_EQ(nodes["nodes"].size(), 1u);
    const json& self = nodes["nodes"][0];
    EXPECT_EQ(self["name"], nodes["node"]);
    EXPECT_EQ(self["state"], "up");
    EXPECT_EQ(self["sandboxes"], 1);
    EXPECT_EQ(self["runtimes"], json::array({"fake"}));
    res = call(http::verb::post, "/v1/nodes/" + nodes["node"].get<std::string>() + "/drain", "{}");
    EXPECT_EQ(res.result_int(), 409u);
    EXPECT_EQ(error(res)["code"], "not_clustered");
    EXPECT_EQ(call(http::verb::get, "/v1/nodes/x/drain").result_int(), 405u);
}

TEST_F(RouterTest, WithoutApiKeysTheStreamStillNeedsAToken) {
    json sandbox = create();
    const std::string base = "/v1/sandboxes/" + sandbox["id"].get<std::string>();
    EXPECT_EQ(call(http::verb::get, base + "/screenshot").result_int(), 200u);
    auto res = call(http::verb::get, base + "/stream");
    EXPECT_EQ(res.result_int(), 401u);
    EXPECT_NE(error(res)["message"].get<std::string>().find("view_token"), std::string::npos);
    // An unknown id is refused like a wrong token: no answer tells which ids exist.
    res = call(http::verb::get, "/v1/sandboxes/sb-none/stream?token=x");
    EXPECT_EQ(res.result_int(), 401u);
}

TEST_F(RouterTest, McpTakesTheKeyOrASandboxsControlTokenAndKeepsSessionsToTheirCredentials) {
    key_ = "k-mcp";
    use_options({{key_}, {}});
    json sandbox = create();
    const std::string id = sandbox["id"];
    const std::string initialize = json{{"jsonrpc", "2.0"},
                                        {"id", 1},
                                        {"method", "initialize"},
                                        {"params",
                                         {{"protocolVersion", "2025-06-18"},
                                          {"capabilities", json::object()},
                                          {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}}
                                       .dump();
    const std::vector<std::pair<std::string, std::string>> json_headers = {
        {"Content-Type", "application/json"}, {"Accept", "application/json, text/event-stream"}};
    auto with = [&](std::vector<std::pair<std::string, std::string>> extra) {
        extra.insert(extra.end(), json_headers.begin(), json_headers.end());
        return extra;
    };
    auto res = call(http::verb::post, "/mcp", initialize, json_headers);
    EXPECT_EQ(res.result_int(), 401u);
    EXPECT_EQ(json::parse(res.body())["error"]["data"]["code"], "unauthorized") << res.body();
    res = call(http::verb::post,
               "/mcp?sandbox=" + id + "&token=" + sandbox["view_token"].get<std::string>(),
               initialize, json_headers);
    EXPECT_EQ(res.result_int(), 401u) << "a view token does not open MCP";

    res = call(http::verb::post,
               "/mcp?sandbox=" + id + "&token=" + sandbox["control_token"].get<std::string>(),
               initialize, json_headers);
    ASSERT_EQ(res.result_int(), 200u) << res.body();
    const std::string session(res["Mcp-Session-Id"]);
    ASSERT_FALSE(session.empty());
    // The session belongs to the sandbox token that opened it: the API key cannot take it over.
    const std::string list_tools = R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})";
    res = call(http::verb::post, "/mcp", list_tools, with({{"Mcp-Session-Id", session}}));
    EXPECT_EQ(res.result_int(), 401u) << "no credentials at all";
    res = call(http::verb::post, "/mcp", list_tools,
               with({{"Mcp-Session-Id", session}, {"Authorization", "Bearer " + key_}}));
    EXPECT_EQ(res.result_int(), 403u) << res.body();
    res = call(http::verb::post,
               "/mcp?sandbox=" + id + "&token=" + sandbox["control_token"].get<std::string>(),
               list_tools, with({{"Mcp-Session-Id", session}}));
    EXPECT_EQ(res.result_int(), 200u) << res.body();
}

TEST_F(RouterTest, EachResourceAnswersA400NamingTheField) {
    json sandbox = create();
    const std::string base = "/v1/sandboxes/" + sandbox["id"].get<std::string>();
    struct Case {
        http::verb method;
        std::string target, body, field;
    };
    const std::vector<Case> cases = {
        {http::verb::post, "/v1/sandboxes?x=1", "{}", "x"},
        {http::verb::post, "/v1/sandboxes", R"({"resolution":"big"})", "resolution"},
        {http::verb::post, base + "/timeout", R"({"timeout_s":"soon"})", "timeout_s"},
        {http::verb::post, base + "/pause", R"({"snapshot":"yes"})", "snapshot"},
        {http::verb::post, base + "/resume", R"({"snapshot":true})", "snapshot"},
        {http::verb::get, base + "/screenshot?format=bmp", "", "format"},
        {http::verb::get, base + "/screenshot?width=wide", "", "width"},
        {http::verb::post, base + "/actions?dialect=gemini", "{}", "dialect"},
        {http::verb::post, base + "/actions", R"({"type":"click","x":"a","y":1})", "x"},
        {http::verb::post, base + "/commands", R"({"cmd":"ls","shell":1})", "shell"},
        {http::verb::post, base + "/commands", R"({"cmd":"ls","stdin":[1]})", "stdin"},
        {http::verb::post, base + "/processes/kill", R"({"signal":9})", ""},
        {http::verb::post, base + "/commands", R"({"cmd":"ls","stream":true,"background":true})",
         "stream"},
        {http::verb::post, base + "/commands", R"({"cmd":"ls","stdin_open":"yes"})", "stdin_open"},
        {http::verb::get, base + "/commands?all=1", "", "all"},
        {http::verb::post, base + "/commands/abc/kill", "{}", "pid"},
        {http::verb::post, base + "/commands/0/kill", "{}", "pid"},
        {http::verb::post, base + "/commands/12/kill", R"({"sig":9})", "sig"},
        {http::verb::post, base + "/commands/12/kill", R"({"signal":[9]})", "signal"},
        {http::verb::post, base + "/commands/-3/stdin", "x", "pid"},
        {http::verb::post, base + "/commands/3/stdin?eof=maybe", "x", "eof"},
        {http::verb::get, base + "/files/list", "", "path"},
        {http::verb::get, base + "/files/list?path=/tmp&recursive=true", "", "recursive"},
        {http::verb::post, base + "/files/mkdir?path=/tmp/x&parents=maybe", "", "parents"},
        {http::verb::post, base + "/files/mkdir?path=/tmp/x", R"({"mode":"0700"})", ""},
        {http::verb::get, base + "/files", "", "path"},
        {http::verb::delete_, base + "/files?path=/tmp/x&recursive=maybe", "", "recursive"},
        {http::verb::put, base + "/files?path=/tmp/x&owner=me", "x", "owner"},
        {http::verb::put, base + "/clipboard", R"({"text":1})", "text"},
        {http::verb::get, base + "/windows?all=1", "", "all"},
        {http::verb::get, base + "/recording?x=1", "", "x"},
        {http::verb::post, base + "/locate?x=1", "{}", "x"},
        // An exposed port checks its credential on the header, before anything else.
        {http::verb::get, base + "/ports/0/?token=" + sandbox["control_token"].get<std::string>(),
         "", "port"},
        {http::verb::get,
         "/view/" + sandbox["id"].get<std::string>() +
             "?token=" + sandbox["view_token"].get<std::string>() + "&zoom=2",
         "", "zoom"},
        {http::verb::post, "/mcp?user=me", "{}", "user"},
    };
    for (const auto& c : cases) {
        auto res = call(c.method, c.target, c.body);
        SCOPED_TRACE(std::string(http::to_string(c.method)) + " " + c.target + " " + c.body);
        EXPECT_EQ(res.result_int(), 400u) << res.body();
        json e = error(res);
        if (c.target.starts_with("/mcp")) e = e.value("data", json::object());
        EXPECT_EQ(e.value("field", ""), c.field) << res.body();
    }
    // Bodies that are not JSON, or not UTF-8, name what is wrong wherever they go.
    auto res = call(http::verb::post, base + "/commands", "{\"cmd\":");
    EXPECT_EQ(error(res)["code"], "malformed_json");
    res = call(http::verb::put, base + "/clipboard", "{\"text\":\"\xc3(\"}");
    EXPECT_EQ(error(res)["code"], "invalid_utf8");
    EXPECT_EQ(error(res)["field"], "text");
    res = call(http::verb::get, base + "/files?path=/tmp/\xff");
    EXPECT_EQ(error(res)["code"], "invalid_utf8");
    EXPECT_EQ(error(res)["field"], "path");
}

// Every route and method in the table reaches its handler through the dispatcher: none
// answers the dispatcher's own refusals (no such endpoint, method not allowed, no sandbox).
TEST_F(RouterTest, TheDispatcherReachesEveryHandlerInTheTable) {
    json sandbox = create();
    for (const auto& route : api_routes()) {
        for (const auto& method : route.methods) {
            if (manager_->list().empty()) sandbox = create();  // the walk's DELETE killed it
            std::string target = instantiate(route.path, sandbox["id"]);
            if (route.auth == RouteAuth::sandbox_token || route.as_sent)
                target += "?token=" + sandbox["control_token"].get<std::string>();
            // A body no handler accepts, so the walk changes nothing it does not mean to.
            const std::string body =
                method.verb == http::verb::post || method.verb == http::verb::put
                    ? R"({"deskbox_route_walk": true})"
                    : "";
            auto res = call(method.verb, target, body);
            const std::string what = std::string(http::to_string(method.verb)) + " " + target +
                                     ": " + std::to_string(res.result_int()) + " " +
                                     res.body().substr(0, 200);
            EXPECT_EQ(res.body().find("no such endpoint"), std::string::npos) << what;
            EXPECT_EQ(res.body().find("(allowed: "), std::string::npos) << what;
            EXPECT_EQ(res.body().find("no sandbox '"), std::string::npos) << what;
            EXPECT_NE(res.result_int(), 500u) << what;
        }
    }
}

// The body limit is the HTTP server's: past it, 413 before any route runs.
TEST_F(RouterTest, AHugeBodyIs413) {
    HttpOptions options;
    options.port = 0;
    options.max_body_bytes = 4096;
    HttpServer server(options,
                      [this](HttpExchange& exchange) { return router().handle(exchange); });
    server.start();
    namespace net = boost::asio;
    net::io_context io;
    boost::beast::tcp_stream stream(io);
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), server.port()));
    HttpRequest request{http::verb::post, "/v1/sandboxes", 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.body() = "{\"metadata\":{\"x\":\"" + std::string(8192, 'a') + "\"}}";
    request.prepare_payload();
    http::write(stream, request);
    boost::beast::flat_buffer buffer;
    HttpResponse res;
    http::read(stream, buffer, res);
    EXPECT_EQ(res.result_int(), 413u) << res.body();
    EXPECT_EQ(error(res)["code"], "payload_too_large");
    EXPECT_TRUE(manager_->list().empty()) << "nothing was created";
    server.stop();
}

// Issue 26, hostile callers: what a web page, a view token or another sandbox's token sends.
class HostileRouter : public RouterTest {
  protected:
    using Headers = std::vector<std::pair<std::string, std::string>>;
    static Headers with(Headers a, const Headers& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    }
};

// One definition of a credential: the router authenticates with ?k%65y= (it decodes names),
// so the relay must strip it as well; the same for every header form.
TEST_F(HostileRouter, EveryCredentialFormIsRecognisedAndStrippedAlike) {
    key_ = "k-hostile-key";
    use_options({{key_}, {}});
    EXPECT_EQ(call(http::verb::get, "/v1/sandboxes?k%65y=" + key_).result_int(), 200u)
        << "a percent-encoded name is the key to the router";
    EXPECT_EQ(query_without_credentials("a=1&k%65y=K&t%6Fken=T&token=x&key=y&b=%20&%6b%65%79=z"),
              "?a=1&b=%20");
    EXPECT_EQ(query_without_credentials("key&token="), "");
    EXPECT_EQ(query_without_credentials("keys=1&tokens=2&x"), "?keys=1&tokens=2&x");
    for (std::string name : {"key", "token", "k%65y", "t%6Fken", "%74oken"}) {
        const std::string decoded = url_decode(name, true);
        EXPECT_TRUE(is_credential_parameter(decoded)) << name;
        EXPECT_EQ(parse_query(name + "=v").count(decoded), 1u) << name;
    }

    HttpRequest request{http::verb::get, "/", 11};
    request.insert(http::field::authorization, "Bearer one");
    request.insert(http::field::authorization, "bearer two");
    request.insert(http::field::authorization, "Basic dXNlcjpwYXNz");
    request.insert("X-API-Key", "k1");
    request.insert("x-api-key", "k2");
    request.insert(http::field::cookie, "a=1; deskbox_token=T; b=2");
    request.insert(http::field::cookie, "deskbox_token=U");
    request.insert(http::field::cookie, "c=3");
    remove_credential_headers(request);
    std::vector<std::string> left;
    for (const auto& field : request)
        left.push_back(std::string(field.name_string()) + ": " + std::string(field.value()));
    EXPECT_EQ(left, (std::vector<std::string>{"Authorization: Basic dXNlcjpwYXNz",
                                              "Cookie: a=1; b=2; c=3"}));
}

// DNS rebinding: without a key, only loopback names (and configured ones) are answered.
TEST_F(HostileRouter, WithoutAKeyAForeignHostIs421) {
    auto res = call(http::verb::get, "/v1/sandboxes", {}, {{"Host", "evil.example:8700"}});
    EXPECT_EQ(res.result_int(), 421u) << res.body();
    EXPECT_EQ(error(res)["code"], "misdirected_request");
    EXPECT_EQ(call(http::verb::post, "/v1/sandboxes", "{}",
                   {{"Host", "evil.example"}, {"Content-Type", "application/json"}})
                  .result_int(),
              421u);
    EXPECT_TRUE(manager_->list().empty());
    for (const char* host : {"localhost", "localhost:8700", "127.0.0.1:1", "127.9.8.7",
                             "[::1]:8700", "LOCALHOST.", "[::1]"})
        EXPECT_EQ(call(http::verb::get, "/v1/sandboxes", {}, {{"Host", host}}).result_int(), 200u)
            << host;
    for (const char* host : {"127.0.0.1.evil.example", "localhost.evil.example", "[::2]", "0"})
        EXPECT_EQ(call(http::verb::get, "/v1/sandboxes", {}, {{"Host", host}}).result_int(), 421u)
            << host;
    ApiOptions options;
    options.allowed_hosts = {"deskbox.lan"};
    options.ports_domain = "ports.test";
    use_options(options);
    for (const char* host : {"deskbox.lan:8700", "ports.test", "8080-sb-x.ports.test:1"})
        EXPECT_NE(call(http::verb::get, "/v1/sandboxes", {}, {{"Host", host}}).result_int(), 421u)
            << host;
    // With a key, the key is what protects: any name may reach the server.
    key_ = "k-any-host";
    use_options({{key_}, {}});
    EXPECT_EQ(call(http::verb::get, "/v1/sandboxes", {},
                   with(key_header(), {{"Host", "deskbox.example.com"}}))
                  .result_int(),
              200u);
}

// A web page may send simple requests cross-site without a preflight: a foreign Origin may not
// change state, and never speaks MCP.
TEST_F(HostileRouter, AForeignOriginMayNotChangeStateNorUseMcp) {
    const Headers json_type = {{"Content-Type", "application/json"}, {"Host", "127.0.0.1:8700"}};
    for (const char* origin : {"http://evil.example", "null", "http://127.0.0.1:8701",
                               "https://127.0.0.1:8700.evil.example"}) {
        auto res =
            call(http::verb::post, "/v1/sandboxes", "{}", with(json_type, {{"Origin", origin}}));
        EXPECT_EQ(res.result_int(), 403u) << origin << " " << res.body();
        EXPECT_EQ(error(res)["code"], "forbidden_origin");
        res = call(http::verb::post, "/mcp", R"({"jsonrpc":"2.0","id":1,"method":"ping"})",
                   with(json_type, {{"Origin", origin}}));
        EXPECT_EQ(res.result_int(), 403u) << origin;
        EXPECT_EQ(json::parse(res.body())["error"]["data"]["code"], "forbidden_origin");
        EXPECT_EQ(call(http::verb::get, "/mcp", {}, {{"Origin", origin}}).result_int(), 403u);
    }
    EXPECT_TRUE(manager_->list().empty());
    // Reading is not changing: a foreign page cannot read the answer anyway (no CORS).
    EXPECT_EQ(call(http::verb::get, "/v1/sandboxes", {}, {{"Origin", "http://evil.example"}})
                  .result_int(),
              200u);
    // The server's own pages (same origin) and configured origins may.
    auto res = call(http::verb::post, "/v1/sandboxes", "{}",
                    with(json_type, {{"Origin", "http://127.0.0.1:8700"}}));
    EXPECT_EQ(res.result_int(), 201u) << res.body();
    ApiOptions options;
    options.allowed_origins = {"https://app.example.com"};
    use_options(options);
    res = call(http::verb::post, "/v1/sandboxes", "{}",
               with(json_type, {{"Origin", "https://app.example.com"}}));
    EXPECT_EQ(res.result_int(), 201u) << res.body();
}

// text/plain and form posts need no preflight: a JSON body must say it is JSON. curl -d (form
// type, no Origin) keeps working.
TEST_F(HostileRouter, JsonBodiesNeedAJsonContentType) {
    const Headers local = {{"Host", "localhost:8700"}};
    auto res = call(http::verb::post, "/v1/sandboxes", "{}",
                    with(local, {{"Content-Type", "text/plain"}}));
    EXPECT_EQ(res.result_int(), 415u) << res.body();
    EXPECT_EQ(error(res)["code"], "unsupported_media_type");
    res = call(http::verb::post, "/v1/sandboxes", "{}",
               with(local, {{"Content-Type", "multipart/form-data; boundary=x"}}));
    EXPECT_EQ(res.result_int(), 415u);
    res = call(http::verb::post, "/v1/sandboxes", "{}",
               with(local, {{"Content-Type", "application/x-www-form-urlencoded"},
                            {"Origin", "http://localhost:8700"}}));
    EXPECT_EQ(res.result_int(), 415u) << "a page's form post, even from our own origin";
    EXPECT_TRUE(manager_->list().empty());
    for (const char* type : {"application/json", "application/json; charset=utf-8",
                             "Application/JSON", "application/x-www-form-urlencoded", ""}) {
        res = call(http::verb::post, "/v1/sandboxes", "{}",
                   type[0] ? with(local, {{"Content-Type", type}}) : local);
        EXPECT_EQ(res.result_int(), 201u) << type << " " << res.body();
    }
}

// /view/ID, /mcp?sandbox=ID and exposed ports answer an unknown id as they answer a wrong token.
TEST_F(HostileRouter, UnknownSandboxIdsAnswerLikeWrongTokens) {
    key_ = "k-oracle";
    use_options({{key_}, {}});
    const std::string id = create()["id"];
    for (auto [known, unknown] : std::vector<std::pair<std::string, std::string>>{
             {"/view/" + id, "/view/sb-nope"},
             {"/view/" + id + "?token=x", "/view/sb-nope?token=x"},
             {"/v1/sandboxes/" + id + "/stream?token=x", "/v1/sandboxes/sb-nope/stream?token=x"},
             {"/v1/sandboxes/" + id + "/ports/80/", "/v1/sandboxes/sb-nope/ports/80/"},
             {"/mcp?sandbox=" + id + "&token=x", "/mcp?sandbox=sb-nope&token=x"}}) {
        const auto method = known.starts_with("/mcp") ? http::verb::post : http::verb::get;
        const std::string body = method == http::verb::post ? "{}" : "";
        auto a = call(method, known, body), b = call(method, unknown, body);
        EXPECT_EQ(a.result_int(), 401u) << known;
        EXPECT_EQ(a.result_int(), b.result_int()) << unknown;
        EXPECT_EQ(a.body(), b.body()) << unknown;
    }
    // Who holds the key may learn it: 404.
    EXPECT_EQ(call(http::verb::get, "/view/sb-nope", {}, key_header()).result_int(), 404u);
}

// A session belongs to whoever opened it, for DELETE as for POST.
TEST_F(HostileRouter, McpDeleteChecksTheSessionsOwner) {
    key_ = "k-mcp-owner";
    use_options({{key_}, {}});
    const json mine = create(), other = create();
    const Headers json_type = {{"Content-Type", "application/json"}};
    const std::string initialize =
        R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})";
    const std::string mine_url = "/mcp?sandbox=" + mine["id"].get<std::string>() +
                                 "&token=" + mine["control_token"].get<std::string>();
    auto res = call(http::verb::post, mine_url, initialize, json_type);
    ASSERT_EQ(res.result_int(), 200u) << res.body();
    const std::string session(res["Mcp-Session-Id"]);
    const std::string other_url = "/mcp?sandbox=" + other["id"].get<std::string>() +
                                  "&token=" + other["control_token"].get<std::string>();
    for (const std::string& url : {other_url, std::string("/mcp?key=") + key_}) {
        res = call(http::verb::delete_, url, {}, {{"Mcp-Session-Id", session}});
        EXPECT_EQ(res.result_int(), 403u) << url << " " << res.body();
    }
    res = call(http::verb::post, mine_url, R"({"jsonrpc":"2.0","id":2,"method":"ping"})",
               with(json_type, {{"Mcp-Session-Id", session}}));
    EXPECT_EQ(res.result_int(), 200u) << "the session is still there: " << res.body();
    res = call(http::verb::delete_, mine_url, {}, {{"Mcp-Session-Id", session}});
    EXPECT_EQ(res.result_int(), 204u) << res.body();
}

// Over a real socket: the header decides, the body of a refused request is never read.
class HostileHttp : public HostileRouter {
  protected:
    void serve(HttpOptions options) {
        options.port = 0;
        server_ = std::make_unique<HttpServer>(
            options, [this](HttpExchange& exchange) { return router().handle(exchange); },
            [this](HttpRequest& header) { return router().check_header(header); });
        server_->start();
    }
    // Sends only the header of a request that announces `length` body bytes, and reads the
    // answer (which must come without the body).
    struct Open {
        boost::asio::io_context io;
        boost::beast::tcp_stream stream{io};
    };
    std::unique_ptr<Open> send_header(http::verb method, const std::string& target,
                                      std::size_t length, const Headers& headers = {}) {
        auto open = std::make_unique<Open>();
        open->stream.connect(boost::asio::ip::tcp::endpoint(
            boost::asio::ip::make_address("127.0.0.1"), server_->port()));
        std::string text = std::string(http::to_string(method)) + " " + target +
                           " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: " +
                           std::to_string(length) + "\r\n";
        for (const auto& [name, value] : headers) text += name + ": " + value + "\r\n";
        text += "\r\n";
        boost::asio::write(open->stream.socket(), boost::asio::buffer(text));
        return open;
    }
    static std::optional<HttpResponse> answer(Open& open) {
        open.stream.expires_after(std::chrono::seconds(10));
        boost::beast::flat_buffer buffer;
        HttpResponse res;
        boost::beast::error_code ec;
        http::read(open.stream, buffer, res, ec);
        if (ec) return std::nullopt;
        return res;
    }
    void TearDown() override {
        if (server_) server_->stop();
    }
    std::unique_ptr<HttpServer> server_;
};

TEST_F(HostileHttp, AnUnauthenticatedBodyIsRefusedOnItsHeader) {
    key_ = "k-header-first";
    use_options({{key_}, {}});
    serve({});
    auto open = send_header(http::verb::post, "/v1/sandboxes", 60u << 20);
    auto res = answer(*open);
    ASSERT_TRUE(res) << "no answer before the body: it waits to read 60 MiB first";
    EXPECT_EQ(res->result_int(), 401u) << res->body();
    EXPECT_FALSE(res->keep_alive());
    // A route's own limit, also decided on the header: 1 MiB of JSON to create a sandbox.
    open = send_header(http::verb::post, "/v1/sandboxes", 2u << 20, key_header());
    res = answer(*open);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->result_int(), 413u) << res->body();
    EXPECT_NE(res->body().find("1048576"), std::string::npos) << res->body();
}

TEST_F(HostileHttp, BodyBytesInFlightAreCappedServerWide) {
    key_ = "k-in-flight";
    use_options({{key_}, {}});
    const std::string id = create()["id"];
    HttpOptions options;
    options.max_body_in_flight = 1u << 20;
    serve(options);
    const std::string upload = "/v1/sandboxes/" + id + "/files?path=/tmp/x";
    // The first upload holds 900 KiB of the budget while its body is on the way: its 100
    // Continue says it was admitted (else the second header may be read first and win).
    auto expect_continue = key_header();
    expect_continue.emplace_back("Expect", "100-continue");
    auto first = send_header(http::verb::put, upload, 900u << 10, expect_continue);
    auto admitted = answer(*first);
    ASSERT_TRUE(admitted);
    ASSERT_EQ(admitted->result_int(), 100u) << admitted->body();
    auto second = send_header(http::verb::put, upload, 900u << 10, key_header());
    auto res = answer(*second);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->result_int(), 503u) << res->body();
    EXPECT_EQ(error(*res)["code"], "server_busy");
    // The first one's body arrives, it is answered, and its share is given back.
    const std::string body(900u << 10, 'x');
    boost::asio::write(first->stream.socket(), boost::asio::buffer(body));
    res = answer(*first);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->body().find("server_busy"), std::string::npos) << res->body();
    auto third = send_header(http::verb::put, upload, 900u << 10, key_header());
    boost::asio::write(third->stream.socket(), boost::asio::buffer(body));
    res = answer(*third);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->body().find("server_busy"), std::string::npos) << res->body();
}

// One version: the OpenAPI document says the one the server (MCP, CLI) reports.
TEST_F(HostileRouter, TheOpenApiDocumentCarriesTheServersVersion) {
    key_ = "k-version";
    use_options({{key_}, {}});
    auto res = call(http::verb::get, "/v1/openapi.json");
    ASSERT_EQ(res.result_int(), 200u);
    EXPECT_EQ(json::parse(res.body())["info"]["version"], kDeskboxVersion);
}

// A connection kept alive says how long it may idle before the server closes it; one that
// closes says nothing of the kind.
TEST_F(HostileHttp, KeptConnectionsSayHowLongTheyMayIdle) {
    key_ = "k-keep-alive";
    use_options({{key_}, {}});
    serve({});
    for (const bool keep : {true, false}) {
        auto open = send_header(http::verb::get, "/healthz", 0,
                                keep ? Headers{} : Headers{{"Connection", "close"}});
        auto res = answer(*open);
        ASSERT_TRUE(res);
        EXPECT_EQ(res->result_int(), 200u);
        EXPECT_EQ(res->keep_alive(), keep);
        if (keep)
            EXPECT_EQ((*res)["Keep-Alive"], "timeout=120");
        else
            EXPECT_EQ(res->find("Keep-Alive"), res->end());
    }
}

}  // namespace
}  // namespace deskbox::server
