// Each admission stage (server/api/admission.hpp) on its own: the stages before it run first, as
// they would, then the stage under test passes the request on, answers, or refuses. Sandboxes of
// a FakeRuntime (no root, no guest); a cluster is a fake OwnerRouting (a real one needs etcd).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api/admission.hpp"
#include "server/api/sandbox_errors.hpp"
#include "server/mcp/mcp_server.hpp"
#include "server/network/port_proxy.hpp"
#include "server/stream/viewer_session.hpp"
#include "tests/support/fake_sandbox_manager.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;
using Headers = std::vector<std::pair<std::string, std::string>>;

// A cluster in which every sandbox but those named `here` is owned by another node.
class FakeOwners : public OwnerRouting {
  public:
    std::optional<HttpResponse> route(HttpExchange&, const std::string& id) override {
        asked.push_back(id);
        if (id == here) return std::nullopt;
        return json_error(503, "node_lost", "owned by node-b");
    }
    bool secret_valid(const HttpRequest& request) const override {
        return request["X-Deskbox-Cluster-Secret"] == "s3cret-s3cret-s3cret";
    }
    std::string here;
    std::vector<std::string> asked;
};

// A request on its way in, as a test holds it (the admission refers to the exchange).
struct Pending {
    Pending(ApiServices& services, HttpRequest r, AdmissionPhase phase)
        : request(std::move(r)), admission(services, exchange, phase) {}
    HttpRequest request;
    HttpExchange exchange{request, nullptr};
    Admission admission;
};

// The stage named `name` in kAdmission, by its position.
std::size_t stage_index(std::string_view name) {
    for (std::size_t i = 0; i < kAdmission.size(); ++i)
        if (kAdmission[i].name == name) return i;
    ADD_FAILURE() << "no stage " << name;
    return kAdmission.size();
}

class AdmissionTest : public ::testing::Test {
  protected:
    // A request whose stages before `stage` have run (and passed: a test of a later stage
    // gives a request the earlier ones let through).
    Admission& before(std::string_view stage, http::verb method, const std::string& target,
                      const Headers& headers = {}, const std::string& body = {}) {
        HttpRequest request{method, target, 11};
        for (const auto& [name, value] : headers) request.set(name, value);
        request.body() = body;
        request.prepare_payload();
        pending_ =
            std::make_unique<Pending>(services_, std::move(request), AdmissionPhase::request);
        Admission& a = pending_->admission;
        if (owners_) a.owners = &*owners_;
        for (std::size_t i = 0; i < stage_index(stage); ++i) {
            auto answer = kAdmission[i].run(a);
            EXPECT_FALSE(answer) << kAdmission[i].name << " answered " << answer->body();
        }
        return a;
    }
    // The ApiError the stage `run` throws on `a`, a SandboxError as the API answers it (status
    // 0 if it passes or answers).
    static ApiError refusal(AdmissionAnswer (*run)(Admission&), Admission& a) {
        try {
            run(a);
        } catch (const ApiError& e) {
            return e;
        } catch (const SandboxError& e) {
            return to_api_error(e);
        }
        return ApiError(0, "", "");
    }
    std::shared_ptr<Sandbox> sandbox() { return manager_->create(json::object()); }
    void use_api_key() { options_.api_keys = {"the-key"}; }
    void in_cluster(std::string here = {}) {
        owners_ = std::make_unique<FakeOwners>();
        owners_->here = std::move(here);
    }

    runtime::FakeTemplate images_;
    std::unique_ptr<SandboxManager> manager_ = test::make_fake_sandbox_manager(images_);
    ApiOptions options_;
    Metrics metrics_;
    ViewerCounters viewers_;
    network::PortProxyCounters ports_;
    McpServer mcp_{*manager_};
    ApiServices services_{*manager_, options_, metrics_, viewers_, ports_, mcp_};
    std::unique_ptr<FakeOwners> owners_;
    std::unique_ptr<Pending> pending_;
};

TEST(AdmissionStages, RunInTheDocumentedOrderTheHeaderStagesFirst) {
    std::vector<std::string_view> names;
    for (const auto& stage : kAdmission) names.push_back(stage.name);
    EXPECT_EQ(names, (std::vector<std::string_view>{"target", "host", "port host", "utf-8", "route",
                                                    "origin", "credentials here", "body size",
                                                    "owner node", "credentials there", "handler"}));
    // What needs no body runs on the header; nothing after the first body stage does.
    for (std::size_t i = 0; i < kAdmission.size(); ++i)
        EXPECT_EQ(kAdmission[i].on_header, i < stage_index("body size")) << kAdmission[i].name;
}

TEST_F(AdmissionTest, TargetIsDecodedIntoPathQueryAndKey) {
    Admission& a =
        before("target", http::verb::get, "/v1/sandboxes/sb%2D1/files?path=%2Ftmp%2Fa+b&key=K%21");
    EXPECT_FALSE(admission::decode_target(a));
    EXPECT_EQ(a.context.path, "/v1/sandboxes/sb-1/files");
    EXPECT_EQ(a.context.query, (Query{{"path", "/tmp/a b"}}));
    EXPECT_EQ(a.context.query_key, "K!") << "?key= is a credential, not a parameter";
    ASSERT_TRUE(a.match);
    EXPECT_EQ(a.match.route->path, "/v1/sandboxes/{id}/files");
    EXPECT_TRUE(a.context.params.empty()) << "the route stage sets them, once it is checked";

    Admission& unknown = before("target", http::verb::get, "/nothing");
    EXPECT_FALSE(admission::decode_target(unknown)) << "404 comes after the UTF-8 check";
    EXPECT_FALSE(unknown.match);

    Admission& bad = before("target", http::verb::get, "/v1/sandboxes/x%zz");
    auto e = refusal(admission::decode_target, bad);
    EXPECT_EQ(e.status(), 400u);
    EXPECT_EQ(e.code(), "bad_request");
    EXPECT_FALSE(bad.for_mcp()) << "not known to be /mcp: a plain JSON error";
}

TEST_F(AdmissionTest, HostOfAKeylessServerMustBeItsOwn) {
    Admission& foreign = before("host", http::verb::get, "/healthz", {{"Host", "evil.example"}});
    auto e = refusal(admission::check_host_name, foreign);
    EXPECT_EQ(e.status(), 421u);
    EXPECT_EQ(e.code(), "misdirected_request");
    EXPECT_EQ(e.field(), "host");
    for (const char* host : {"localhost:8700", "127.0.0.1", "[::1]:8700"})
        EXPECT_FALSE(admission::check_host_name(
            before("host", http::verb::get, "/healthz", {{"Host", host}})))
            << host;
    use_api_key();  // the key protects; any name may reach the server
    EXPECT_EQ(refusal(admission::check_host_name,
                      before("host", http::verb::get, "/healthz", {{"Host", "evil.example"}}))
                  .status(),
              0u);
}

TEST_F(AdmissionTest, PortHostNamesAPortWhateverThePath) {
    options_.ports_domain = "ports.test";
    Admission& a = before("port host", http::verb::post, "/v1/sandboxes?token=T&x=1",
                          {{"Host", "3000-sb-1.ports.test:8700"}});
    EXPECT_FALSE(admission::find_port_host(a));
    ASSERT_TRUE(a.port);
    EXPECT_EQ(a.port->id, "sb-1");
    EXPECT_EQ(a.port->port, 3000);
    EXPECT_EQ(a.port->target, "/v1/sandboxes?x=1") << "the program never sees our token";
    EXPECT_EQ(a.body_limit, options_.max_upload_body);

    Admission& api = before("port host", http::verb::get, "/healthz", {{"Host", "ports.test"}});
    EXPECT_FALSE(admission::find_port_host(api));
    EXPECT_FALSE(api.port);
    EXPECT_EQ(api.body_limit, options_.max_json_body);

    EXPECT_EQ(refusal(admission::find_port_host,
                      before("port host", http::verb::get, "/", {{"Host", "nodash.ports.test"}}))
                  .status(),
              404u);
    EXPECT_EQ(refusal(admission::find_port_host,
                      before("port host", http::verb::get, "/", {{"Host", "0-sb-1.ports.test"}}))
                  .field(),
              "port");
    options_.ports_domain.clear();
    use_api_key();  // else that Host is a foreign name (421 at stage 2)
    Admission& no_domain =
        before("port host", http::verb::get, "/", {{"Host", "3000-sb-1.ports.test"}});
    EXPECT_FALSE(admission::find_port_host(no_domain));
    EXPECT_FALSE(no_domain.port);
}

TEST_F(AdmissionTest, Utf8IsCheckedOnOurRoutesOnly) {
    auto e = refusal(admission::check_utf8, before("utf-8", http::verb::get, "/v1/%FF"));
    EXPECT_EQ(e.status(), 400u);
    EXPECT_EQ(e.code(), "invalid_utf8");
    EXPECT_EQ(e.field(), "path");
    EXPECT_EQ(
        refusal(admission::check_utf8, before("utf-8", http::verb::get, "/healthz?a=%FF")).field(),
        "a");
    EXPECT_EQ(refusal(admission::check_utf8,
                      before("utf-8", http::verb::get, "/healthz", {{"X-Note", "\xff"}}))
                  .field(),
              "X-Note");
    // A browser sends other programs' cookies for the host name: not ours to refuse.
    EXPECT_FALSE(admission::check_utf8(
        before("utf-8", http::verb::get, "/healthz", {{"Cookie", "other=\xff"}})));
    // A program behind an exposed port gets the request as sent, by path or by host name.
    EXPECT_FALSE(admission::check_utf8(
        before("utf-8", http::verb::get, "/v1/sandboxes/sb-1/ports/3000/%FF?q=%FE")));
    options_.ports_domain = "ports.test";
    EXPECT_FALSE(admission::check_utf8(
        before("utf-8", http::verb::get, "/%FF", {{"Host", "3000-sb-1.ports.test"}})));
}

TEST_F(AdmissionTest, RouteRefusesUnknownPathsAndUnlistedMethods) {
    auto e = refusal(admission::match_route, before("route", http::verb::get, "/v1/nothing"));
    EXPECT_EQ(e.status(), 404u);
    EXPECT_EQ(e.code(), "not_found");

    auto answer = admission::match_route(before("route", http::verb::put, "/v1/sandboxes"));
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->result_int(), 405u);
    EXPECT_EQ((*answer)[http::field::allow], "GET, POST");
    EXPECT_NE(metrics_.render_counters().find("method_not_allowed"), std::string::npos);
    auto mcp = admission::match_route(before("route", http::verb::put, "/mcp"));
    ASSERT_TRUE(mcp);
    EXPECT_EQ(json::parse(mcp->body())["error"]["data"]["code"], "method_not_allowed")
        << "JSON-RPC for /mcp's clients";

    Admission& upload = before("route", http::verb::put, "/v1/sandboxes/sb-1/files?path=/a");
    EXPECT_FALSE(admission::match_route(upload));
    EXPECT_EQ(upload.body_limit, options_.max_upload_body);
    EXPECT_EQ(upload.context.params.at("id"), "sb-1");
    Admission& small = before("route", http::verb::post, "/v1/sandboxes/sb-1/actions");
    EXPECT_FALSE(admission::match_route(small));
    EXPECT_EQ(small.body_limit, options_.max_json_body);
}

TEST_F(AdmissionTest, CrossSiteRequestsMayNotChangeStateNorUseMcp) {
    const Headers evil = {{"Host", "localhost:8700"}, {"Origin", "https://evil.example"}};
    auto e = refusal(admission::check_cross_site,
                     before("origin", http::verb::post, "/v1/sandboxes", evil));
    EXPECT_EQ(e.status(), 403u);
    EXPECT_EQ(e.code(), "forbidden_origin");
    EXPECT_EQ(refusal(admission::check_cross_site, before("origin", http::verb::get, "/mcp", evil))
                  .status(),
              403u);
    EXPECT_FALSE(admission::check_cross_site(before("origin", http::verb::get, "/healthz", evil)));
    EXPECT_FALSE(admission::check_cross_site(
        before("origin", http::verb::post, "/v1/sandboxes",
               {{"Host", "localhost:8700"}, {"Origin", "http://localhost:8700"}})));
    // Exposed ports' programs decide which Origins they take.
    EXPECT_FALSE(admission::check_cross_site(
        before("origin", http::verb::post, "/v1/sandboxes/sb-1/ports/3000/form", evil)));
}

TEST_F(AdmissionTest, CredentialsHereOnASingleNodeCheckEverything) {
    use_api_key();
    auto e = refusal(admission::check_credentials_here,
                     before("credentials here", http::verb::get, "/v1/sandboxes"));
    EXPECT_EQ(e.status(), 401u);
    Admission& keyed = before("credentials here", http::verb::get, "/v1/sandboxes?key=the-key");
    EXPECT_FALSE(admission::check_credentials_here(keyed));
    EXPECT_EQ(keyed.context.access, Access::control);

    auto box = sandbox();
    Admission& viewer = before("credentials here", http::verb::get,
                               "/view/" + box->id() + "?token=" + box->view_token());
    EXPECT_FALSE(admission::check_credentials_here(viewer));
    EXPECT_EQ(viewer.context.access, Access::view);
    EXPECT_EQ(viewer.context.sandbox, box);
    EXPECT_EQ(refusal(admission::check_credentials_here, before("credentials here", http::verb::get,
                                                                "/view/" + box->id() + "?token=x"))
                  .status(),
              401u);
    // An unknown id answers like a wrong token, unless an API key shows the caller may know.
    EXPECT_EQ(refusal(admission::check_credentials_here,
                      before("credentials here", http::verb::get, "/view/sb-none?token=x"))
                  .status(),
              401u);
    EXPECT_EQ(refusal(admission::check_credentials_here,
                      before("credentials here", http::verb::get, "/view/sb-none?key=the-key"))
                  .status(),
              404u);
    // Exposed ports take the control token, not the view token.
    EXPECT_EQ(
        refusal(admission::check_credentials_here,
                before("credentials here", http::verb::get,
                       "/v1/sandboxes/" + box->id() + "/ports/3000/?token=" + box->view_token()))
            .status(),
        401u);
    // Nodes' own routes need a cluster.
    EXPECT_EQ(refusal(admission::check_credentials_here,
                      before("credentials here", http::verb::get, "/v1/cluster/templates/abc"))
                  .status(),
              404u);
}

TEST_F(AdmissionTest, CredentialsHereInAClusterLeaveTokensToTheOwner) {
    use_api_key();
    in_cluster();
    // A sandbox's route: this node checks the API key, so no stranger makes it talk to others...
    EXPECT_EQ(refusal(admission::check_credentials_here,
                      before("credentials here", http::verb::get, "/v1/sandboxes/sb-b/screenshot"))
                  .status(),
              401u);
    // ...but the sandbox is not looked up here (it may live on another node).
    Admission& keyed =
        before("credentials here", http::verb::get, "/v1/sandboxes/sb-b/screenshot?key=the-key");
    EXPECT_FALSE(admission::check_credentials_here(keyed));
    EXPECT_FALSE(keyed.context.sandbox);
    // Tokens are known to the owner only.
    EXPECT_FALSE(admission::check_credentials_here(
        before("credentials here", http::verb::get, "/view/sb-b?token=x")));
    // Routes about no sandbox are checked here in full.
    EXPECT_EQ(refusal(admission::check_credentials_here,
                      before("credentials here", http::verb::get, "/v1/sandboxes"))
                  .status(),
              401u);
    EXPECT_EQ(refusal(admission::check_credentials_here,
                      before("credentials here", http::verb::get, "/v1/cluster/templates/abc",
                             {{"Authorization", "Bearer the-key"}}))
                  .status(),
              401u)
        << "an API key does not open the nodes' routes";
    EXPECT_FALSE(admission::check_credentials_here(
        before("credentials here", http::verb::get, "/v1/cluster/templates/abc",
               {{"X-Deskbox-Cluster-Secret", "s3cret-s3cret-s3cret"}})));
}

TEST_F(AdmissionTest, BodySizeIsTheRoutesLimit) {
    options_.max_json_body = 8;
    const Headers key = {};
    EXPECT_FALSE(admission::check_body_size(
        before("body size", http::verb::post, "/v1/sandboxes", key, "12345678")));
    auto e = refusal(admission::check_body_size,
                     before("body size", http::verb::post, "/v1/sandboxes", key, "123456789"));
    EXPECT_EQ(e.status(), 413u);
    EXPECT_EQ(e.code(), "payload_too_large");
}

TEST_F(AdmissionTest, OwnerNodeIsAskedAboutSandboxesOnlyInACluster) {
    EXPECT_FALSE(admission::route_to_owner(
        before("credentials here", http::verb::get, "/v1/sandboxes/sb-b/screenshot")))
        << "a single node serves its own (stage 7 says 404 for any other id)";
    in_cluster("sb-here");
    auto answer = admission::route_to_owner(
        before("owner node", http::verb::get, "/v1/sandboxes/sb-b/screenshot"));
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->result_int(), 503u) << "the owner's answer is the answer";
    EXPECT_FALSE(admission::route_to_owner(
        before("owner node", http::verb::get, "/v1/sandboxes/sb-here/screenshot")));
    EXPECT_FALSE(admission::route_to_owner(before("owner node", http::verb::get, "/v1/sandboxes")));
    options_.ports_domain = "ports.test";
    EXPECT_TRUE(admission::route_to_owner(
        before("owner node", http::verb::get, "/", {{"Host", "3000-sb-p.ports.test"}})));
    EXPECT_EQ(owners_->asked, (std::vector<std::string>{"sb-b", "sb-here", "sb-p"}));
}

TEST_F(AdmissionTest, CredentialsThereAreTheOwnersPartInACluster) {
    auto box = sandbox();
    in_cluster(box->id());
    const std::string view = "/view/" + box->id();
    EXPECT_EQ(refusal(admission::check_credentials_there,
                      before("credentials there", http::verb::get, view + "?token=x"))
                  .status(),
              401u);
    Admission& a =
        before("credentials there", http::verb::get, view + "?token=" + box->control_token());
    EXPECT_FALSE(admission::check_credentials_there(a));
    EXPECT_EQ(a.context.access, Access::control);
    EXPECT_EQ(a.context.sandbox, box);
    // On a single node stage 7 checked everything: nothing is left here.
    owners_.reset();
    Admission& single = before("credentials here", http::verb::get, view + "?token=x");
    EXPECT_FALSE(admission::check_credentials_there(single));
}

TEST_F(AdmissionTest, HandlerIsTheRoutesOrThePortsRelay) {
    auto healthz = admission::run_handler(before("handler", http::verb::get, "/healthz"));
    ASSERT_TRUE(healthz);
    EXPECT_EQ(healthz->result_int(), 200u);
    // A port host goes to the relay, which finds the fake sandbox has no network.
    options_.ports_domain = "ports.test";
    auto box = sandbox();
    auto e = refusal(admission::run_handler,
                     before("handler", http::verb::get, "/?token=" + box->control_token(),
                            {{"Host", "3000-" + box->id() + ".ports.test"}}));
    EXPECT_EQ(e.code(), "port_unreachable");
}

TEST_F(AdmissionTest, TheHeaderPhaseStopsBeforeTheBody) {
    options_.max_json_body = 4;
    HttpRequest header{http::verb::post, "/v1/sandboxes", 11};
    header.body() = "far too long";
    Pending on_header(services_, header, AdmissionPhase::header);
    EXPECT_FALSE(admit(on_header.admission)) << "the body is HttpServer's to limit then";
    Pending whole(services_, header, AdmissionPhase::request);
    EXPECT_EQ(refusal(admit, whole.admission).status(), 413u);
}

}  // namespace
}  // namespace deskbox::server
