// The events' parts on their own: the durable log (ids across reopenings, a partial last line
// cut off, old events read back from the file past what memory keeps), which audit lines become
// which events, the webhook config's checks, where a webhook may point, the signature (checked
// against Python's hmac), and https delivery against a real TLS receiver on loopback.
#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.hpp"
#include "server/events/event_log.hpp"
#include "server/events/event_service.hpp"
#include "server/events/webhook.hpp"
#include "server/events/webhook_sender.hpp"
#include "server/network/egress_ca.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/webhook_receiver.hpp"

namespace deskbox::server::events {
namespace {

using nlohmann::json;

Event event_of(const std::string& type, const std::string& sandbox = "sb-1") {
    Event e;
    e.type = type;
    e.sandbox_id = sandbox;
    e.template_name = "minimal";
    return e;
}

TEST(EventLog, IdsGoOnAcrossReopeningsAndAPartialLastLineIsCutOff) {
    TempDir dir("event-log");
    {
        EventLog log(dir.path());
        EXPECT_EQ(log.append(event_of("created")).id, 1u);
        EXPECT_EQ(log.append(event_of("ready")).id, 2u);
    }
    // A crash in the middle of a line (or a disk that filled up).
    std::ofstream(dir.path() / "events.jsonl", std::ios::app) << R"({"id":3,"type":"kil)";
    EventLog log(dir.path());
    EXPECT_EQ(log.last_id(), 2u);
    EXPECT_EQ(log.append(event_of("killed")).id, 3u);
    EventLog again(dir.path());
    const auto all = again.read_after(0, 100);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[2].type, "killed");
    EXPECT_EQ(all[2].template_name, "minimal");
    EXPECT_FALSE(all[2].time.empty());
}

// A node's ids name it; a log written before they did (bare numbers) loads after the upgrade,
// its events read as this node's, from memory and from the file alike, and numbering goes on.
TEST(EventLog, ALogWithBareNumberIdsLoadsAsTheNodesAndItsIdsGoOn) {
    for (const std::string node : {"node-a", ""}) {
        SCOPED_TRACE("node '" + node + "'");
        TempDir dir("event-log");
        {
            // Three lines as deskboxd wrote them before ids named a node.
            std::ofstream old(dir.path() / "events.jsonl");
            for (int i = 1; i <= 3; ++i)
                old << R"({"data":{},"id":)" << i
                    << R"(,"metadata":{},"sandbox_id":"sb-1","template":"minimal",)"
                    << R"("time":"2026-01-01T00:00:0)" << i << R"(.000Z","type":"created"})"
                    << "\n";
        }
        const std::string prefix = node.empty() ? "" : node + ":";
        {
            EventLog log(dir.path(), /*kept_in_memory=*/1, node);  // older ones from the file
            EXPECT_EQ(log.last_id(), 3u);
            const auto old = log.read_after(0, 10);
            ASSERT_EQ(old.size(), 3u);
            EXPECT_EQ(old[0].public_id(), prefix + "1");
            EXPECT_EQ(old[0].to_json()["id"], prefix + "1");
            EXPECT_EQ(old[2].node, node);
            EXPECT_EQ(log.read_after(1, 1).at(0).public_id(), prefix + "2");
            const Event next = log.append(event_of("killed"));
            EXPECT_EQ(next.id, 4u);
            EXPECT_EQ(next.public_id(), prefix + "4");
        }
        std::ifstream in(dir.path() / "events.jsonl");
        std::string line, last_line;
        while (std::getline(in, line)) last_line = line;
        EXPECT_EQ(json::parse(last_line)["id"], prefix + "4") << "written as it is shown";
        EventLog again(dir.path(), 4096, node);
        const auto all = again.read_after(0, 10);
        ASSERT_EQ(all.size(), 4u);
        for (std::uint64_t i = 0; i < 4; ++i)
            EXPECT_EQ(all[i].public_id(), prefix + std::to_string(i + 1));
        EXPECT_EQ(all[3].type, "killed");
    }
}

TEST(EventIds, NodeAndNumberOrANumberAlone) {
    const auto clustered = parse_event_id("node-a.b_c:42");
    ASSERT_TRUE(clustered);
    EXPECT_EQ(clustered->node, "node-a.b_c");
    EXPECT_EQ(clustered->sequence, 42u);
    const auto bare = parse_event_id("7");
    ASSERT_TRUE(bare);
    EXPECT_EQ(bare->node, "");
    EXPECT_EQ(bare->sequence, 7u);
    EXPECT_EQ(parse_event_id("18446744073709551615")->sequence, 18446744073709551615ull);
    for (const char* bad : {"", ":1", "a:", "a:-1", "-1", "a:1x", "a b:1", "-a:1", "a:b:1",
                            "18446744073709551616", "a:+1"})
        EXPECT_FALSE(parse_event_id(bad)) << bad;
    Event e = event_of("ready");
    e.id = 9;
    e.node = "node-b";
    EXPECT_EQ(Event::from_json(e.to_json()).public_id(), "node-b:9");
}

TEST(EventLog, OldEventsComeFromTheFileAndListenersHearNewOnes) {
    TempDir dir("event-log");
    EventLog log(dir.path(), /*kept_in_memory=*/8);
    std::vector<std::uint64_t> heard;
    auto subscription = log.subscribe([&](const Event& e) { heard.push_back(e.id); });
    for (int i = 0; i < 1000; ++i) log.append(event_of(i % 2 ? "killed" : "created"));
    EXPECT_EQ(heard.size(), 1000u);
    EXPECT_FALSE(log.recent_after(500, 10).has_value());  // memory keeps the last 8
    const auto from_file = log.read_after(700, 5);
    ASSERT_EQ(from_file.size(), 5u);
    EXPECT_EQ(from_file.front().id, 701u);
    EXPECT_EQ(from_file.back().id, 705u);
    EXPECT_EQ(log.recent_after(995, 10)->size(), 5u);
    EXPECT_TRUE(log.read_after(1000, 10).empty());
    subscription.reset();
    log.append(event_of("created"));
    EXPECT_EQ(heard.size(), 1000u);
}

// `count` events numbered from 1, the first `old` of them written in 2020 and the rest in 2030,
// as the log's file.
void write_dated_log(const std::filesystem::path& dir, int count, int old) {
    std::ofstream out(dir / "events.jsonl");
    for (int i = 1; i <= count; ++i) {
        Event e = event_of("created");
        e.id = static_cast<std::uint64_t>(i);
        e.time = i <= old ? "2020-01-01T00:00:00.000Z" : "2030-01-01T00:00:00.000Z";
        out << e.to_json().dump() << "\n";
    }
}

TEST(EventLog, TrimDropsOldEventsButNoneAWebhookStillNeeds) {
    TempDir dir("event-log");
    write_dated_log(dir.path(), 600, 500);
    EventLog log(dir.path(), /*kept_in_memory=*/8);
    const std::string cutoff = "2026-01-01T00:00:00.000Z";
    // A webhook has had up to 450: only those go.
    EXPECT_EQ(log.trim(cutoff, 451), 450u);
    EXPECT_EQ(log.first_id(), 451u);
    const auto all = log.read_after(0, 1000);
    ASSERT_EQ(all.size(), 150u);
    EXPECT_EQ(all.front().id, 451u);
    ASSERT_EQ(log.read_after(520, 3).size(), 3u);  // from the file, through the moved index
    EXPECT_EQ(log.read_after(520, 3).front().id, 521u);
    // Delivered: the rest of the old ones go, the newer stay.
    EXPECT_EQ(log.trim(cutoff, 10'000), 50u);
    EXPECT_EQ(log.trim(cutoff, 10'000), 0u);
    EXPECT_EQ(log.first_id(), 501u);
    EXPECT_EQ(log.append(event_of("killed")).id, 601u);
    EXPECT_EQ(log.read_after(599, 10).size(), 2u);

    EventLog again(dir.path());
    EXPECT_EQ(again.last_id(), 601u);
    EXPECT_EQ(again.first_id(), 501u);
    EXPECT_EQ(again.read_after(0, 1000).size(), 101u);
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "events.jsonl.trim"));
}

TEST(EventService, RecordingTrimsEventsPastTheRetention) {
    TempDir state("event-service");
    std::filesystem::create_directories(state.path() / "events");
    write_dated_log(state.path() / "events", 20, 15);
    EventService service(state.path(), {},
                         EventRetention{std::chrono::hours(24), std::chrono::hours(1)});
    EXPECT_EQ(service.log().first_id(), 1u);  // nothing goes before something is recorded
    service.record("sb-2", "minimal", json::object(), "create", json::object());
    EXPECT_EQ(service.log().first_id(), 16u);
    EXPECT_EQ(service.log().last_id(), 21u);
}

// A webhook that stays down while the log grows past max_undelivered loses the oldest events
// (the one it was retrying too), counted; back up, it gets the newest in order, and the log no
// longer keeps what it was given up on.
TEST(EventService, AWebhookFarBehindLosesTheOldestAndGetsTheRest) {
    deskbox::test::WebhookReceiver receiver;
    receiver.set_status(500);
    TempDir state("event-backlog");
    WebhookConfig hook;
    hook.url = receiver.url("/hook");
    hook.secret = "s";
    hook.retry_initial = std::chrono::milliseconds(20);
    hook.retry_max = std::chrono::milliseconds(50);
    EventService service(state.path(), {hook},
                         EventRetention{std::chrono::hours(0), std::chrono::seconds(0), 5});
    service.start_delivery({boost::asio::ip::make_address("127.0.0.1"), 1});
    auto record = [&](int i) {
        service.record("sb-" + std::to_string(i), "minimal", json::object(), "create",
                       json::object());
    };
    record(1);
    const auto& sender = *service.senders().front();
    ASSERT_TRUE(deskbox::test::eventually([&] { return sender.failed_attempts() > 0; }));
    for (int i = 2; i <= 12; ++i) record(i);  // 12 events, 5 kept for it: 1..7 dropped
    ASSERT_TRUE(deskbox::test::eventually([&] { return sender.dropped() == 7; }))
        << sender.dropped();
    // Kept no time past delivery (0 h), the log holds only what the webhook may still get.
    EXPECT_EQ(service.log().first_id(), 8u);
    receiver.set_status(200);
    ASSERT_TRUE(deskbox::test::eventually([&] { return sender.cursor() == 12; }));
    std::vector<std::string> ids;
    for (const auto& r : receiver.accepted()) ids.push_back(json::parse(r.body)["id"]);
    EXPECT_EQ(ids, (std::vector<std::string>{"8", "9", "10", "11", "12"}));
    EXPECT_EQ(sender.delivered(), 5u);
    EXPECT_EQ(sender.dropped(), 7u);
}

TEST(LifecycleEvents, AuditLinesBecomeEvents) {
    auto types = [](const std::string& kind, const json& detail) {
        std::string out;
        for (const auto& e : lifecycle_events_of(kind, detail)) out += e.type + ";";
        return out;
    };
    EXPECT_EQ(types("create", {{"env", {{"TOKEN", "secret"}}}}), "created;");
    EXPECT_TRUE(lifecycle_events_of("create", {{"env", "x"}})[0].data.empty());  // no request
    EXPECT_EQ(types("ready", {{"ready", true}, {"waited_ms", 5}}), "ready;");
    EXPECT_EQ(types("ready", {{"ready", false}, {"unmet", "window"}}), "error;");
    EXPECT_EQ(types("timeout", {{"timeout_s", 30}}), "");  // a client setting it
    EXPECT_EQ(types("timeout", {{"action", "kill"}}), "timeout;");
    EXPECT_EQ(types("timeout", {{"action", "pause"}}), "timeout;paused;");
    EXPECT_EQ(types("auto_resume", json::object()), "resumed;");
    EXPECT_EQ(types("restore", json::object()), "");  // a resume's own line follows
    EXPECT_EQ(types("snapshot_saved", {{"name", "a"}}), "snapshot_created;");
    EXPECT_EQ(lifecycle_events_of("error", {{"reason", "oom"}})[0].data["reason"], "oom");
    EXPECT_EQ(types("command", {{"cmd", "ls"}}), "");
}

TEST(LifecycleEvents, TypesAreCheckedByName) {
    EXPECT_EQ(parse_event_types("created,killed").size(), 2u);
    EXPECT_TRUE(parse_event_types("").empty());
    EXPECT_THROW(parse_event_types("created,exploded"), std::invalid_argument);
    EXPECT_THROW(parse_event_types("created,"), std::invalid_argument);
}

TEST(Webhooks, TheSignatureIsHmacSha256OfTimeDotBody) {
    // hmac.new(b"key", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
    EXPECT_EQ(webhook_signature("key", 1700000000, R"({"a":1})"),
              "t=1700000000,v1=a438e398bfafc57e4396bb7fc2304422f0f768e965d073ca313cb52e22e6ad03");
}

TEST(Webhooks, TheConfigIsCheckedNamingTheField) {
    TempDir dir("webhooks");
    std::ofstream(dir.path() / "secret") << "from-a-file\n";
    const auto hooks =
        parse_webhooks(json::parse(R"([{"url":"http://127.0.0.1:9/h","secret_file":"secret",
                         "events":["killed"],"timeout_ms":250}])"),
                       dir.path());
    ASSERT_EQ(hooks.size(), 1u);
    EXPECT_EQ(hooks[0].secret, "from-a-file");
    EXPECT_EQ(hooks[0].types, std::set<std::string>{"killed"});
    EXPECT_EQ(hooks[0].timeout.count(), 250);
    auto refused = [&](const char* text) {
        try {
            parse_webhooks(json::parse(text), dir.path());
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(refused(R"([{"url":"http://x/","secret":"s","events":["boom"]}])")
                  .find("webhooks[0].events"),
              std::string::npos);
    EXPECT_NE(refused(R"([{"url":"ftp://x/","secret":"s"}])").find("webhooks[0].url"),
              std::string::npos);
    EXPECT_NE(refused(R"([{"url":"http://x/"}])").find("webhooks[0].secret"), std::string::npos);
    EXPECT_NE(refused(R"([{"url":"http://x/","secret":"s","secrt":1}])").find("webhooks[0].secrt"),
              std::string::npos);
    EXPECT_NE(refused(R"([{"url":"http://[fe80::1]:80/","secret":"s"}])").find("link-local"),
              std::string::npos);
    EXPECT_EQ(refused(R"([{"url":"http://169.254.169.254/","secret":"s","allow_private":true}])"),
              "accepted");
    // https: the same rules, and ca_file only there, read at once.
    EXPECT_EQ(refused(R"([{"url":"https://hooks.example/in","secret":"s"}])"), "accepted");
    EXPECT_NE(refused(R"([{"url":"https://169.254.169.254/","secret":"s"}])").find("link-local"),
              std::string::npos);
    EXPECT_NE(refused(R"([{"url":"http://x/","secret":"s","ca_file":"ca.pem"}])")
                  .find("webhooks[0].ca_file: only for https"),
              std::string::npos);
    EXPECT_NE(refused(R"([{"url":"https://x/","secret":"s","ca_file":"missing.pem"}])")
                  .find("webhooks[0].ca_file"),
              std::string::npos);
    std::ofstream(dir.path() / "not-a-ca.pem") << "hello\n";
    EXPECT_NE(refused(R"([{"url":"https://x/","secret":"s","ca_file":"not-a-ca.pem"}])")
                  .find("webhooks[0].ca_file: cannot read certificates"),
              std::string::npos);
    EXPECT_NE(
        refused(R"([{"url":"https://x/","secret":"s","ca_file":7}])").find("webhooks[0].ca_file"),
        std::string::npos);
    const auto ca = network::EgressCa::load_or_create(dir.path() / "ca");
    const auto with_ca = parse_webhooks(
        json::parse(R"([{"url":"https://127.0.0.1:9/h","secret":"s","ca_file":"ca/ca.pem"}])"),
        dir.path());
    EXPECT_EQ(with_ca.at(0).ca_file, dir.path() / "ca/ca.pem");
}

TEST(Webhooks, TheUrlSaysTlsPortPathAndHost) {
    const auto https = webhook_target("HTTPS://hooks.example/in/deskbox");
    EXPECT_TRUE(https.tls);
    EXPECT_EQ(https.host, "hooks.example");
    EXPECT_EQ(https.port, "443");
    EXPECT_EQ(https.path, "/in/deskbox");
    EXPECT_EQ(https.host_header, "hooks.example");
    const auto own_port = webhook_target("https://[::1]:8443");
    EXPECT_EQ(own_port.host, "::1");
    EXPECT_EQ(own_port.port, "8443");
    EXPECT_EQ(own_port.path, "/");
    EXPECT_EQ(own_port.host_header, "[::1]:8443");
    const auto plain = webhook_target("http://10.0.0.5/h");
    EXPECT_FALSE(plain.tls);
    EXPECT_EQ(plain.port, "80");
    EXPECT_EQ(webhook_target("https://x:80/").host_header, "x:80");
    EXPECT_THROW(webhook_target("ftp://x/"), std::invalid_argument);
    EXPECT_THROW(webhook_target("https://u@x/"), std::invalid_argument);
    // https to deskboxd's own port is deskboxd itself, as for http.
    const SelfAddress self{boost::asio::ip::make_address("127.0.0.1"), 443};
    WebhookConfig own;
    own.url = "https://127.0.0.1/h";
    EXPECT_THROW(check_webhook_url(own, self), std::invalid_argument);
}

// A server context presenting `leaf` (the receiver's side of TLS).
std::shared_ptr<boost::asio::ssl::context> serving(const network::LeafCertificate& leaf) {
    auto context =
        std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_server);
    network::use_leaf_certificate(context->native_handle(), leaf);
    return context;
}

// An https webhook delivers only to a certificate it trusts for the URL's address: one from an
// unknown CA, then one of its own CA for another name, fail (each a counted, retried attempt
// naming the certificate, nothing delivered); once the receiver has the right one, every event
// arrives in order, signed.
TEST(Webhooks, HttpsDeliversOnlyToACertificateItTrustsForTheAddress) {
    TempDir dir("webhook-tls");
    const auto trusted = network::EgressCa::load_or_create(dir.path() / "trusted");
    const auto unknown = network::EgressCa::load_or_create(dir.path() / "unknown");
    deskbox::test::WebhookReceiver receiver;
    receiver.use_tls(serving(*unknown->leaf_for("127.0.0.1")));
    WebhookConfig hook;
    hook.url = receiver.url("/hook");
    ASSERT_EQ(hook.url.rfind("https://127.0.0.1:", 0), 0u) << hook.url;
    hook.secret = "s";
    hook.ca_file = trusted->certificate_path();
    hook.timeout = std::chrono::milliseconds(2000);
    hook.retry_initial = std::chrono::milliseconds(20);
    hook.retry_max = std::chrono::milliseconds(100);
    EventService service(dir.path() / "state", {hook});
    service.start_delivery({boost::asio::ip::make_address("127.0.0.1"), 1});
    const auto& sender = *service.senders().front();
    for (int i = 1; i <= 3; ++i)
        service.record("sb-" + std::to_string(i), "minimal", json::object(), "create",
                       json::object());

    ASSERT_TRUE(deskbox::test::eventually([&] { return sender.failed_attempts() >= 2; }));
    EXPECT_NE(sender.last_failure().find("certificate is not trusted"), std::string::npos)
        << sender.last_failure();
    // The receiver sends its CA along: a chain ending in a CA nobody here trusts.
    EXPECT_NE(sender.last_failure().find("self-signed certificate in certificate chain"),
              std::string::npos)
        << sender.last_failure();
    EXPECT_GE(receiver.tls_failures(), 1);

    // The CA it trusts, for a name that is not the URL's address.
    receiver.use_tls(serving(*trusted->leaf_for("localhost")));
    const auto before = sender.failed_attempts();
    ASSERT_TRUE(deskbox::test::eventually([&] {
        return sender.failed_attempts() >= before + 2 &&
               sender.last_failure().find("mismatch") != std::string::npos;
    })) << sender.last_failure();
    EXPECT_NE(sender.last_failure().find("IP address mismatch"), std::string::npos)
        << sender.last_failure();
    EXPECT_TRUE(receiver.accepted().empty());
    EXPECT_EQ(sender.delivered(), 0u);

    receiver.use_tls(serving(*trusted->leaf_for("127.0.0.1")));
    ASSERT_TRUE(deskbox::test::eventually([&] { return sender.delivered() == 3; }))
        << sender.last_failure();
    std::vector<std::string> sandboxes;
    for (const auto& r : receiver.accepted()) {
        const std::string signature = r.header("Deskbox-Signature");
        const auto t = std::stoll(signature.substr(2, signature.find(',') - 2));
        EXPECT_EQ(signature, webhook_signature("s", t, r.body));
        EXPECT_EQ(r.target, "/hook");
        sandboxes.push_back(json::parse(r.body)["sandbox_id"]);
    }
    EXPECT_EQ(sandboxes, (std::vector<std::string>{"sb-1", "sb-2", "sb-3"}));
}

TEST(Webhooks, NeverDeskboxdItselfNorLinkLocalUnlessAllowed) {
    using boost::asio::ip::make_address;
    const SelfAddress self{make_address("127.0.0.1"), 8700};
    EXPECT_NE(refusal_of(make_address("127.0.0.1"), 8700, self, true), "");
    EXPECT_EQ(refusal_of(make_address("127.0.0.1"), 8701, self, false), "");
    const SelfAddress any{make_address("0.0.0.0"), 8700};
    EXPECT_NE(refusal_of(make_address("127.0.0.1"), 8700, any, false), "");
    EXPECT_NE(refusal_of(make_address("::ffff:169.254.169.254"), 80, self, false), "");
    EXPECT_EQ(refusal_of(make_address("169.254.169.254"), 80, self, true), "");
    EXPECT_EQ(refusal_of(make_address("10.0.0.5"), 80, self, false), "");
}

}  // namespace
}  // namespace deskbox::server::events
