// POST /v1/sandboxes bodies checked without a server: defaults, the template's session under
// the request's own fields, and an invalid-field error naming the field for each kind of mistake.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/sandbox/create_request.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

// Templates: "plain" without a session, "wide" with a 1920x1080 session at 120 dpi, "apps"
// autostarting two programs, "waits" with a `ready` of its own, "broken" with a bad one.
json definition_of(const std::string& name) {
    if (name == "plain") return json::object();
    if (name == "wide") return {{"session", {{"resolution", {1920, 1080}}, {"dpi", 120}}}};
    if (name == "apps")
        return {{"session", {{"autostart", {{"xterm"}, {"xclock", "-update", "1"}}}}}};
    if (name == "waits")
        return {{"session", {{"autostart", {{"xterm"}}}}},
                {"ready", {{"window_title", "Mousepad"}, {"timeout_s", 120}}}};
    if (name == "broken") return {{"ready", {{"windows", "all"}}}};
    throw invalid_field("template", "unknown template '" + name + "'");
}

CreateDefaults defaults() {
    CreateDefaults d;
    d.template_name = "plain";
    d.runtime_name = "fake";
    d.timeout = std::chrono::seconds(300);
    d.max_timeout = std::chrono::seconds(3600);
    d.disk_mb = 4096;
    d.network = network::NetworkPolicy::closed();
    return d;
}

CreateRequest parse(const json& request) {
    return parse_create_request(request, defaults(), definition_of);
}

// The SandboxError a bad request gets (it must be invalid, bad_request).
SandboxError error_of(const json& request) {
    try {
        parse(request);
    } catch (const SandboxError& e) {
        EXPECT_EQ(e.fault(), SandboxFault::invalid) << e.what();
        EXPECT_EQ(e.code(), "bad_request");
        return e;
    }
    ADD_FAILURE() << "accepted: " << request.dump();
    return SandboxError(SandboxFault::failed, "", "");
}

TEST(SandboxCreateRequest, AnEmptyBodyTakesTheServersDefaults) {
    auto [c, definition] = parse(json::object());
    EXPECT_EQ(c.template_name, "plain");
    EXPECT_EQ(c.runtime_name, "fake");
    EXPECT_EQ(c.width, 1280);
    EXPECT_EQ(c.height, 800);
    EXPECT_EQ(c.dpi, 96);
    EXPECT_EQ(c.timeout, std::chrono::seconds(300));
    EXPECT_FALSE(c.pause_on_timeout);
    EXPECT_EQ(c.limits.disk_mb, 4096u);
    EXPECT_FALSE(c.network.enabled());
    EXPECT_TRUE(c.vnc);
    EXPECT_TRUE(c.fast_start);
    EXPECT_FALSE(c.api_resolution);
    EXPECT_EQ(definition, json::object());
}

TEST(SandboxCreateRequest, TheTemplatesSessionComesUnderTheRequestsOwnFields) {
    auto wide = parse({{"template", "wide"}}).config;
    EXPECT_EQ(wide.width, 1920);
    EXPECT_EQ(wide.height, 1080);
    EXPECT_EQ(wide.dpi, 120);
    auto mine = parse({{"template", "wide"}, {"resolution", {800, 600}}, {"dpi", 144}}).config;
    EXPECT_EQ(mine.width, 800);
    EXPECT_EQ(mine.height, 600);
    EXPECT_EQ(mine.dpi, 144);
}

TEST(SandboxCreateRequest, EveryFieldIsRead) {
    auto c = parse({{"runtime", "gvisor"},
                    {"api_resolution", {1024, 768}},
                    {"timeout_s", 60},
                    {"on_timeout", "pause"},
                    {"metadata", {{"user", "ada"}}},
                    {"env", {{"LANG", "de_DE.UTF-8"}}},
                    {"vnc", false},
                    {"record", {{"actions", true}, {"fps", 10}}},
                    {"fast_start", false},
                    {"network", true},
                    {"limits",
                     {{"memory_mb", 1024},
                      {"cpus", 1.5},
                      {"pids", 256},
                      {"disk_mb", 512},
                      {"egress_kbps", 800}}}})
                 .config;
    EXPECT_EQ(c.runtime_name, "gvisor") << "whether it exists is the server's to say";
    ASSERT_TRUE(c.api_resolution);
    EXPECT_EQ(c.api_resolution->width, 1024);
    EXPECT_EQ(c.timeout, std::chrono::seconds(60));
    EXPECT_TRUE(c.pause_on_timeout);
    EXPECT_EQ(c.metadata["user"], "ada");
    EXPECT_EQ(c.env.at("LANG"), "de_DE.UTF-8");
    EXPECT_FALSE(c.vnc);
    EXPECT_FALSE(c.fast_start);
    EXPECT_TRUE(c.network.enabled());
    EXPECT_EQ(c.limits.memory_mb, 1024u);
    EXPECT_DOUBLE_EQ(c.limits.cpus, 1.5);
    EXPECT_EQ(c.limits.pids, 256u);
    EXPECT_EQ(c.limits.disk_mb, 512u);
    EXPECT_EQ(c.egress_kbps, 800u);
}

TEST(SandboxCreateRequest, MistakesAre400sNamingTheField) {
    struct Case {
        json request;
        std::string field;
    };
    const std::vector<Case> cases = {
        {json::array(), ""},
        {{{"colour", "red"}}, "colour"},
        {{{"template", 3}}, "template"},
        {{{"template", "nope"}}, "template"},
        {{{"runtime", true}}, "runtime"},
        {{{"resolution", {10, 10}}}, "resolution"},
        {{{"resolution", {1280, 9000}}}, "resolution"},
        {{{"resolution", "1280x800"}}, "resolution"},
        {{{"api_resolution", {1280}}}, "api_resolution"},
        {{{"dpi", 601}}, "dpi"},
        {{{"dpi", 96.5}}, "dpi"},
        {{{"timeout_s", 0}}, "timeout_s"},
        {{{"timeout_s", 3601}}, "timeout_s"},
        {{{"timeout_s", "60"}}, "timeout_s"},
        {{{"on_timeout", "stop"}}, "on_timeout"},
        {{{"metadata", "x"}}, "metadata"},
        {{{"metadata", {{"big", std::string(17000, 'a')}}}}, "metadata"},
        {{{"env", {{"A", 1}}}}, "env.A"},
        {{{"env", {{"A=B", "c"}}}}, "env"},
        {{{"vnc", "yes"}}, "vnc"},
        {{{"record", 1}}, "record"},
        {{{"record", {{"audio", true}}}}, "record.audio"},
        {{{"record", {{"fps", 61}}}}, "record.fps"},
        {{{"fast_start", 1}}, "fast_start"},
        {{{"limits", 5}}, "limits"},
        {{{"limits", {{"memory_mb", 64}}}}, "limits.memory_mb"},
        {{{"limits", {{"cpus", 65}}}}, "limits.cpus"},
        {{{"limits", {{"pids", 16}}}}, "limits.pids"},
        {{{"limits", {{"disk_mb", 32}}}}, "limits.disk_mb"},
        {{{"limits", {{"egress_kbps", 1}}}}, "limits.egress_kbps"},
        {{{"limits", {{"gpu", 1}}}}, "limits.gpu"},
        {{{"network", {{"allow", "example.com"}}}}, "network.allow"},
        {{{"ready", "yes"}}, "ready"},
        {{{"ready", 1}}, "ready"},
        {{{"ready", {{"windows", "autostart"}, {"timeout", 5}}}}, "ready.timeout"},
        {{{"ready", {{"command", {"pgrep", 1}}}}}, "ready.command[1]"},
        {{{"ready", {{"port", 0}}}}, "ready.port"},
        {{{"ready", {{"timeout_s", 601}}}}, "ready.timeout_s"},
    };
    for (const auto& c : cases) EXPECT_EQ(error_of(c.request).field(), c.field) << c.request.dump();
}

TEST(SandboxCreateRequest, UnknownFieldsAreRefusedBeforeTheTemplateIsLookedUp) {
    int lookups = 0;
    auto counting = [&](const std::string& name) {
        ++lookups;
        return definition_of(name);
    };
    EXPECT_THROW(parse_create_request({{"template", "wide"}, {"x", 1}}, defaults(), counting),
                 SandboxError);
    EXPECT_EQ(lookups, 0);
    parse_create_request({{"template", "wide"}}, defaults(), counting);
    EXPECT_EQ(lookups, 1) << "one lookup per request";
}

}  // namespace
}  // namespace deskbox::server

namespace deskbox::server {
namespace {

// When a create answers: the template's `ready` (default: as many windows as it autostarts),
// replaced by the request's, or not waited for with "ready": false.
TEST(SandboxCreateRequest, ReadyIsTheTemplatesUnlessTheRequestSaysOtherwise) {
    auto plain = parse(json::object()).config.ready;
    EXPECT_TRUE(plain.wait);
    EXPECT_EQ(plain.windows, 0);
    EXPECT_FALSE(plain.waits()) << "no autostart: the first frame is enough";

    auto apps = parse({{"template", "apps"}}).config.ready;
    EXPECT_EQ(apps.windows, 2);
    EXPECT_TRUE(apps.windows_from_autostart);
    EXPECT_EQ(apps.timeout, std::chrono::seconds(60));
    EXPECT_EQ(apps.settle, std::chrono::milliseconds(300));

    auto waits = parse({{"template", "waits"}}).config.ready;
    EXPECT_FALSE(waits.windows) << "a template's ready names its own conditions";
    EXPECT_EQ(waits.window_title, "Mousepad");
    EXPECT_EQ(waits.timeout, std::chrono::seconds(120));

    auto skipped = parse({{"template", "apps"}, {"ready", false}}).config.ready;
    EXPECT_FALSE(skipped.wait);
    EXPECT_FALSE(skipped.waits());
    EXPECT_EQ(parse({{"template", "waits"}, {"ready", true}}).config.ready.window_title,
              "Mousepad");

    auto own = parse({{"template", "waits"},
                      {"ready", {{"command", {"pgrep", "xclock"}}, {"timeout_s", 5}}}})
                   .config.ready;
    EXPECT_TRUE(own.window_title.empty()) << "the request's replaces the template's";
    EXPECT_EQ(own.command, std::vector<std::string>({"pgrep", "xclock"}));
    EXPECT_EQ(own.timeout, std::chrono::seconds(5));
    EXPECT_EQ(
        parse({{"template", "apps"}, {"ready", {{"windows", "autostart"}}}}).config.ready.windows,
        2)
        << "autostart: the template's entries";
}

TEST(SandboxCreateRequest, ABadReadyInTheTemplateIsATemplateError) {
    try {
        parse({{"template", "broken"}});
        ADD_FAILURE() << "accepted";
    } catch (const SandboxError& e) {
        EXPECT_EQ(e.fault(), SandboxFault::failed);
        EXPECT_EQ(e.code(), "template_error");
        EXPECT_EQ(e.field(), "template.ready.windows");
    }
}

}  // namespace
}  // namespace deskbox::server
