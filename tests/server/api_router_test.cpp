// ApiRouter without root and without a guest: sandboxes of a FakeRuntime (an in-process agent
// that answers screen.sync and refuses the rest), requests handed to the router in-process, and
// once through a real HttpServer for its body limit. Covers the route table itself, 404/405,
// credentials, a sandbox's create -> inspect -> list -> delete, and each resource's 400s.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "server/api/api_router.hpp"
#include "server/api/api_routes.hpp"
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
        // Per-sandbox routes are the ones under /v1/sandboxes/{id} and /view/{id}; a token
        // route always has a sandbox to check the token against.
        EXPECT_EQ(route.per_sandbox(), route.path.starts_with("/v1/sandboxes/{id}") ||
                                           route.path.starts_with("/view/{id}"));
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
    EXPECT_EQ(json::parse(killed.body()), (json{{"id", id}, {"state", "killed"}}));
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
    // A token route looks the sandbox up first: an unknown one is a 404 whatever the token.
    res = call(http::verb::get, "/v1/sandboxes/sb-none/stream?token=x");
    EXPECT_EQ(res.result_int(), 404u);
    EXPECT_EQ(error(res)["field"], "id");
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
        {http::verb::get, base + "/files", "", "path"},
        {http::verb::delete_, base + "/files?path=/tmp/x&recursive=maybe", "", "recursive"},
        {http::verb::put, base + "/files?path=/tmp/x&owner=me", "x", "owner"},
        {http::verb::put, base + "/clipboard", R"({"text":1})", "text"},
        {http::verb::get, base + "/windows?all=1", "", "all"},
        {http::verb::get, base + "/recording?x=1", "", "x"},
        {http::verb::post, base + "/locate?x=1", "{}", "x"},
        {http::verb::get, base + "/ports/0/", "", "port"},
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

}  // namespace
}  // namespace deskbox::server
