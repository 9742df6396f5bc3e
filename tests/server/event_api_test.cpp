// Lifecycle events through a real deskboxd with real containers: a webhook receiver on
// loopback gets each event of a sandbox's life in order, signed; while it is down, answers 500
// or stalls, events wait and then arrive in order, none lost, and sandbox operations go on; a
// SIGKILLed server resumes delivery after its restart; an https webhook delivers only to a
// certificate it trusts; GET /v1/events streams them and resumes after an id; a link-local
// webhook is refused at start.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "server/events/event.hpp"
#include "server/network/egress_ca.hpp"
#include "tests/server/deskboxd_fixture.hpp"
#include "tests/server/event_stream_client.hpp"
#include "tests/support/webhook_receiver.hpp"

namespace deskbox {
namespace {

using namespace test;

constexpr const char* kSecret = "whsec-test-0123456789";

// The config file a server gets: one webhook to `receiver`, quick to retry and time out.
std::filesystem::path write_config(const TempDir& dir, const WebhookReceiver& receiver,
                                   json extra = json::object()) {
    json hook = {{"url", receiver.url()},
                 {"secret", kSecret},
                 {"timeout_ms", 400},
                 {"retry_initial_ms", 50},
                 {"retry_max_ms", 400}};
    hook.update(extra);
    const auto path = dir.path() / "deskboxd.json";
    std::ofstream(path) << json{{"webhooks", json::array({hook})}}.dump();
    return path;
}

std::string hmac_hex(const std::string& key, const std::string& text) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
         reinterpret_cast<const unsigned char*>(text.data()), text.size(), mac, &n);
    std::string hex;
    char two[3];
    for (unsigned int i = 0; i < n; ++i) {
        std::snprintf(two, sizeof two, "%02x", mac[i]);
        hex += two;
    }
    return hex;
}

// Checks the request as a receiver would (signature over "<t>.<body>", t within 5 minutes, the
// id header matching the body) and returns its event.
json verified_event(const ReceivedRequest& r) {
    const std::string signature = r.header("Deskbox-Signature");
    const auto comma = signature.find(",v1=");
    EXPECT_EQ(signature.rfind("t=", 0), 0u) << signature;
    EXPECT_NE(comma, std::string::npos) << signature;
    if (comma == std::string::npos) return json();
    const std::string t = signature.substr(2, comma - 2);
    EXPECT_EQ(signature.substr(comma + 4), hmac_hex(kSecret, t + "." + r.body));
    const long long now = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    EXPECT_LT(std::llabs(now - std::stoll(t)), 300);
    EXPECT_EQ(r.header("Content-Type"), "application/json");
    const json event = json::parse(r.body);
    EXPECT_EQ(r.header("Deskbox-Event-Id"), event["id"].get<std::string>());
    return event;
}

// A single server's event id ("42", a string since ids name their node in a cluster) as the
// number it counts.
std::uint64_t sequence_of(const json& event) {
    EXPECT_TRUE(event["id"].is_string()) << event;
    const auto id = server::events::parse_event_id(event.value("id", ""));
    EXPECT_TRUE(id && id->node.empty()) << event;
    return id ? id->sequence : 0;
}

// The types of `sandbox`'s events the receiver accepted, each id once (a redelivery is allowed),
// checking signatures and that ids only grow.
std::vector<std::string> delivered_types(const WebhookReceiver& receiver,
                                         const std::string& sandbox) {
    std::vector<std::string> types;
    std::set<std::uint64_t> seen;
    std::uint64_t last = 0;
    for (const auto& r : receiver.accepted()) {
        const json event = verified_event(r);
        if (event.is_null()) continue;
        const auto id = sequence_of(event);
        if (!seen.insert(id).second) continue;
        EXPECT_GT(id, last) << "out of order: " << r.body;
        last = id;
        if (event["sandbox_id"] == sandbox) types.push_back(event["type"]);
    }
    return types;
}

std::string create(Server& s, json body = json::object()) {
    body["network"] = false;
    auto created = s.post("/v1/sandboxes", body);
    EXPECT_EQ(created.status, 201u) << created.body << s.log();
    return created.js().value("id", "");
}

std::string joined(const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
    return out;
}

TEST(Events, AWebhookGetsEverySandboxEventInOrderSigned) {
    REQUIRE_TEMPLATE();
    WebhookReceiver receiver;
    TempDir dir("deskboxd-events");
    Server s({"--config", write_config(dir, receiver).string()});
    const std::string id = create(s, {{"metadata", {{"customer", "acme"}}}});
    ASSERT_EQ(s.post("/v1/sandboxes/" + id + "/pause", json::object()).status, 200u);
    ASSERT_EQ(s.post("/v1/sandboxes/" + id + "/resume", json::object()).status, 200u);
    auto made = s.post("/v1/sandboxes/" + id + "/snapshots", {{"name", "events-base"}});
    ASSERT_EQ(made.status, 201u) << made.body;
    ASSERT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    const std::string want = "created,ready,paused,resumed,snapshot_created,killed";
    EXPECT_TRUE(eventually([&] { return joined(delivered_types(receiver, id)) == want; }))
        << joined(delivered_types(receiver, id)) << "\n"
        << s.log();
    const json first = json::parse(receiver.accepted().front().body);
    EXPECT_EQ(first["template"], "minimal");
    EXPECT_EQ(first["metadata"]["customer"], "acme");
    EXPECT_EQ(receiver.accepted().front().target, "/hook");
    EXPECT_EQ(s.log().find(kSecret), std::string::npos);
}

TEST(Events, AWebhookThatIsDownGetsTheEventsInOrderOnceBack) {
    REQUIRE_TEMPLATE();
    WebhookReceiver receiver;
    TempDir dir("deskboxd-events");
    const auto config = write_config(dir, receiver);
    receiver.stop();
    Server s({"--config", config.string()});
    const std::string first = create(s);
    ASSERT_EQ(s.del("/v1/sandboxes/" + first).status, 200u);
    const std::string second = create(s);
    ASSERT_EQ(s.del("/v1/sandboxes/" + second).status, 200u);
    // Refused meanwhile: retried (the server's log says so), nothing delivered.
    EXPECT_TRUE(eventually([&] { return s.log().find("cannot connect") != std::string::npos; }));
    EXPECT_TRUE(receiver.received().empty());
    receiver.start();
    EXPECT_TRUE(eventually([&] {
        return joined(delivered_types(receiver, first)) == "created,ready,killed" &&
               joined(delivered_types(receiver, second)) == "created,ready,killed";
    })) << s.log();
    const json last_of_first = json::parse(receiver.accepted()[2].body);
    EXPECT_EQ(last_of_first["sandbox_id"], first);  // the first sandbox's come first
}

TEST(Events, AWebhookAnswering500OrStallingIsRetriedAndDelaysNoSandbox) {
    REQUIRE_TEMPLATE();
    WebhookReceiver receiver;
    TempDir dir("deskboxd-events");
    Server s({"--config", write_config(dir, receiver).string()});
    receiver.set_status(500);
    const std::string id = create(s);
    EXPECT_TRUE(eventually([&] { return receiver.received().size() >= 3; }));
    receiver.set_status(307);  // a redirect is a failure too, and not followed
    const auto before = receiver.received().size();
    EXPECT_TRUE(eventually([&] { return receiver.received().size() >= before + 2; }));
    for (const auto& r : receiver.received()) EXPECT_EQ(r.target, "/hook");
    // Stalled past the webhook's timeout: the receiver holds a delivery while the sandbox is
    // killed and another made and killed.
    receiver.set_delay(std::chrono::hours(1));
    receiver.set_status(200);
    ASSERT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    const std::string other = create(s);
    ASSERT_EQ(s.del("/v1/sandboxes/" + other).status, 200u);
    EXPECT_TRUE(receiver.accepted().empty());
    EXPECT_TRUE(eventually([&] { return s.log().find("no answer") != std::string::npos; }))
        << s.log();
    receiver.set_delay(std::chrono::milliseconds(0));
    EXPECT_TRUE(eventually([&] {
        return joined(delivered_types(receiver, id)) == "created,ready,killed" &&
               joined(delivered_types(receiver, other)) == "created,ready,killed";
    })) << s.log();
    // What operators watch: the failures, what went through, nothing given up on.
    // (The sender counts an answer just after the receiver recorded it: waited for.)
    const std::string label = "{url=\"" + receiver.url("/hook") + "\"} ";
    std::string metrics;
    EXPECT_TRUE(eventually([&] {
        metrics = s.get("/metrics").body;
        return metrics.find("deskbox_webhook_delivered_total" + label + "6\n") != std::string::npos;
    })) << metrics;
    EXPECT_NE(metrics.find("deskbox_webhook_dropped_total" + label + "0"), std::string::npos);
    EXPECT_NE(metrics.find("deskbox_webhook_backlog_events" + label + "0"), std::string::npos);
    EXPECT_EQ(metrics.find("deskbox_webhook_failed_attempts_total" + label + "0\n"),
              std::string::npos);
}

// An https webhook with its own CA file: while the receiver shows a certificate of a CA nobody
// configured, each attempt fails naming the certificate (counted, retried, no sandbox waits);
// once it shows one of the configured CA, every event arrives in order, signed.
TEST(Events, AnHttpsWebhookGetsEventsOnlyFromACertificateItsCaFileTrusts) {
    REQUIRE_TEMPLATE();
    TempDir dir("deskboxd-events");
    const auto trusted = network::EgressCa::load_or_create(dir.path() / "receiver-ca");
    const auto unknown = network::EgressCa::load_or_create(dir.path() / "unknown-ca");
    auto serving = [](const network::LeafCertificate& leaf) {
        auto context =
            std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_server);
        network::use_leaf_certificate(context->native_handle(), leaf);
        return context;
    };
    WebhookReceiver receiver;
    receiver.use_tls(serving(*unknown->leaf_for("127.0.0.1")));
    // Relative to the config file's folder.
    Server s(
        {"--config", write_config(dir, receiver, {{"ca_file", "receiver-ca/ca.pem"}}).string()});
    const std::string id = create(s);
    ASSERT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    EXPECT_TRUE(eventually([&] {
        return s.log().find("the receiver's certificate is not trusted") != std::string::npos;
    })) << s.log();
    const std::string label = "{url=\"" + receiver.url("/hook") + "\"} ";
    const std::string metrics = s.get("/metrics").body;
    EXPECT_EQ(metrics.find("deskbox_webhook_failed_attempts_total" + label + "0\n"),
              std::string::npos)
        << metrics;
    EXPECT_NE(metrics.find("deskbox_webhook_failed_attempts_total" + label), std::string::npos);
    EXPECT_TRUE(eventually([&] { return receiver.tls_failures() >= 1; }));
    EXPECT_TRUE(receiver.accepted().empty());

    receiver.use_tls(serving(*trusted->leaf_for("127.0.0.1")));
    EXPECT_TRUE(eventually([&] {
        return joined(delivered_types(receiver, id)) == "created,ready,killed";
    })) << joined(delivered_types(receiver, id))
        << "\n"
        << s.log();
}

TEST(Events, DeliveryResumesAfterTheServerIsKilledLosingNothing) {
    REQUIRE_TEMPLATE();
    WebhookReceiver receiver;
    TempDir dir("deskboxd-events");
    TempDir state("deskboxd-events-state");
    const auto config = write_config(dir, receiver);
    std::string delivered_before, queued;
    std::uint64_t last_id_before = 0;
    {
        Server s({"--config", config.string()}, state.path() / "state");
        delivered_before = create(s);
        ASSERT_EQ(s.del("/v1/sandboxes/" + delivered_before).status, 200u);
        ASSERT_TRUE(
            eventually([&] { return delivered_types(receiver, delivered_before).size() == 3; }));
        receiver.stop();
        queued = create(s);
        ASSERT_EQ(s.del("/v1/sandboxes/" + queued).status, 200u);
        s.kill_hard();
    }
    for (const auto& r : receiver.accepted())
        last_id_before = std::max(last_id_before, sequence_of(json::parse(r.body)));
    receiver.start();
    Server s({"--config", config.string()}, state.path() / "state");
    const std::string after = create(s);
    ASSERT_EQ(s.del("/v1/sandboxes/" + after).status, 200u);
    EXPECT_TRUE(eventually([&] {
        return joined(delivered_types(receiver, queued)) == "created,ready,killed" &&
               joined(delivered_types(receiver, after)) == "created,ready,killed";
    })) << s.log();
    EXPECT_EQ(joined(delivered_types(receiver, delivered_before)), "created,ready,killed");
    // Each id at most twice (once more if the cursor was not saved yet), none lost, and the
    // restarted server's ids go on from the last one.
    std::map<std::uint64_t, int> times;
    for (const auto& r : receiver.accepted()) ++times[sequence_of(json::parse(r.body))];
    for (const auto& [id, n] : times) EXPECT_LE(n, 2) << id;
    EXPECT_EQ(times.size(), 9u);
    EXPECT_EQ(times.rbegin()->first, times.size());
    EXPECT_EQ(last_id_before, 3u);
}

TEST(Events, ALinkLocalWebhookIsRefusedAtStart) {
    TempDir dir("deskboxd-events");
    const auto config = dir.path() / "deskboxd.json";
    std::ofstream(config)
        << json{{"webhooks", {{{"url", "http://169.254.169.254/latest"}, {"secret", "x"}}}}}.dump();
    TempDir state("deskboxd-events-state");
    try {
        DeskboxdProcess server(test_paths::kDeskboxd, state.path() / "state",
                               dir.path() / "deskboxd.log", {"--config", config.string()});
        ADD_FAILURE() << "deskboxd started with a link-local webhook";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("webhooks[0].url"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("link-local"), std::string::npos) << e.what();
    }
}

TEST(Events, TheStreamShowsEventsAndResumesAfterAnId) {
    REQUIRE_TEMPLATE();
    Server s;
    EventStreamClient live(s.port(), "/v1/events");
    const std::string head = live.header();
    EXPECT_NE(head.find("200 OK"), std::string::npos) << head;
    EXPECT_NE(head.find("text/event-stream"), std::string::npos) << head;
    const std::string id = create(s);
    ASSERT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    std::vector<json> seen;
    for (int i = 0; i < 3; ++i) seen.push_back(live.next());
    ASSERT_EQ(seen[2].value("type", ""), "killed") << seen[2];
    EXPECT_EQ(seen[0].value("type", ""), "created");
    EXPECT_EQ(seen[0].value("sandbox_id", ""), id);
    const std::string created_id = seen[0]["id"];

    // Resumed after the created event: the rest, from the log.
    EventStreamClient resumed(s.port(), "/v1/events", "Last-Event-ID: " + created_id + "\r\n");
    resumed.header();
    EXPECT_EQ(resumed.next().value("type", ""), "ready");
    EventStreamClient filtered(s.port(), "/v1/events?after=0&types=killed");
    filtered.header();
    const json killed = filtered.next();
    EXPECT_EQ(killed.value("type", ""), "killed");
    EXPECT_EQ(killed.value("sandbox_id", ""), id);

    // A sandbox's token sees its own events only.
    auto other = s.post("/v1/sandboxes", {{"network", false}});
    ASSERT_EQ(other.status, 201u);
    const json other_js = other.js();
    const std::string other_id = other_js["id"];
    EventStreamClient own(s.port(), "/v1/sandboxes/" + other_id + "/events?after=0&token=" +
                                        other_js["view_token"].get<std::string>());
    EXPECT_NE(own.header().find("200 OK"), std::string::npos);
    const json first_own = own.next();
    EXPECT_EQ(first_own.value("sandbox_id", ""), other_id);
    EXPECT_EQ(first_own.value("type", ""), "created");
    ASSERT_EQ(s.del("/v1/sandboxes/" + other_id).status, 200u);

    // Bad input: 400 naming the parameter.
    auto bad_type = s.get("/v1/events?types=created,exploded");
    EXPECT_EQ(bad_type.status, 400u);
    EXPECT_EQ(bad_type.js()["error"].value("field", ""), "types");
    auto bad_after = s.get("/v1/events?after=-3");
    EXPECT_EQ(bad_after.status, 400u);
    EXPECT_EQ(bad_after.js()["error"].value("field", ""), "after");
    // Another node's id is not a number of this log: refused naming that node.
    auto foreign = s.call(http::verb::get, "/v1/events", {}, {{"Last-Event-ID", "node-x:3"}});
    EXPECT_EQ(foreign.status, 400u) << foreign.body;
    EXPECT_EQ(foreign.js()["error"].value("field", ""), "Last-Event-ID");
    EXPECT_NE(foreign.js()["error"].value("message", "").find("node node-x"), std::string::npos)
        << foreign.body;
    auto bad_token = s.get("/v1/sandboxes/" + other_id + "/events?token=wrong");
    EXPECT_EQ(bad_token.status, 401u);
}

// `deskbox events` follows the same stream: from an id of the log, live, filtered, and says
// clearly what the server refused.
TEST(Events, TheCliPrintsTheStream) {
    REQUIRE_TEMPLATE();
    Server s;
    const std::string server = "http://127.0.0.1:" + std::to_string(s.port());
    const std::string id = create(s);
    ASSERT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    auto cli = [&](std::vector<std::string> args) {
        args.insert(args.begin(), {test_paths::kDeskboxCli, "--server", server, "events"});
        return run_process(args, std::chrono::seconds(60));
    };
    auto logged = cli({"--after", "0", "--types", "created,killed", "--count", "2", "--json"});
    ASSERT_EQ(logged.status.exit_code, 0) << logged.err;
    std::istringstream lines(logged.out);
    std::string first, second;
    std::getline(lines, first);
    std::getline(lines, second);
    EXPECT_EQ(json::parse(first).value("type", ""), "created") << logged.out;
    EXPECT_EQ(json::parse(second).value("type", ""), "killed") << logged.out;
    EXPECT_EQ(json::parse(second).value("sandbox_id", ""), id) << logged.out;

    // Following: the next killed event after the one above, printed as a line, then the CLI
    // exits (after that id, so it is the other sandbox's whether it comes live or from the log).
    TempDir out_dir("deskbox-events-cli");
    SpawnOptions spawn;
    spawn.argv = {test_paths::kDeskboxCli,
                  "--server",
                  server,
                  "events",
                  "--types",
                  "killed",
                  "--count",
                  "1",
                  "--after",
                  json::parse(second)["id"].get<std::string>()};
    spawn.stdout_file = (out_dir.path() / "out").string();
    auto follower = ChildProcess::spawn(spawn);
    const std::string other = create(s);
    ASSERT_EQ(s.del("/v1/sandboxes/" + other).status, 200u);
    const auto ended = follower.wait(std::chrono::seconds(30));
    ASSERT_TRUE(ended.has_value()) << "deskbox events did not stop after --count 1";
    EXPECT_EQ(ended->exit_code, 0);
    std::ifstream printed(out_dir.path() / "out");
    const std::string out((std::istreambuf_iterator<char>(printed)), {});
    EXPECT_NE(out.find("  killed  " + other), std::string::npos) << out;

    auto refused = cli({"--types", "created,exploded", "--count", "1"});
    EXPECT_EQ(refused.status.exit_code, 1);
    EXPECT_NE(refused.err.find("types"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace deskbox

namespace deskbox {
namespace {

using namespace test;

TEST(Events, TimeoutsAndFailedCreatesAreEvents) {
    REQUIRE_TEMPLATE();
    Server s;
    EventStreamClient stream(s.port(), "/v1/events?types=timeout,error,killed");
    stream.header();
    const std::string id = create(s, {{"timeout_s", 1}});
    const json timeout = stream.next();
    EXPECT_EQ(timeout.value("type", ""), "timeout") << timeout;
    EXPECT_EQ(timeout.value("sandbox_id", ""), id);
    EXPECT_EQ(timeout["data"].value("action", ""), "kill");
    const json killed = stream.next();
    EXPECT_EQ(killed.value("type", ""), "killed") << killed;
    EXPECT_EQ(killed.value("sandbox_id", ""), id);

    auto failed = s.post("/v1/sandboxes", {{"network", false},
                                           {"ready", {{"command", {"false"}}, {"timeout_s", 1}}}});
    EXPECT_EQ(failed.status, 504u) << failed.body;
    const json error = stream.next();
    EXPECT_EQ(error.value("type", ""), "error") << error;
    EXPECT_NE(error["data"].value("reason", "").find("not ready"), std::string::npos) << error;
}

}  // namespace
}  // namespace deskbox
