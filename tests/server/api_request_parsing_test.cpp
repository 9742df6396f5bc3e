// The API's request parsers, one resource at a time, as pure functions: each bad body or query
// is a 400 with the exact code and field a client is told.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api/http_util.hpp"
#include "server/api/routes/actions.hpp"
#include "server/api/routes/commands.hpp"
#include "server/api/routes/desktop.hpp"
#include "server/api/routes/files.hpp"
#include "server/api/routes/lifecycle.hpp"
#include "server/api/routes/ports.hpp"
#include "server/api/routes/screen.hpp"
#include "server/api/routes/viewers.hpp"
#include "server/api/sandbox_errors.hpp"

namespace deskbox::server::routes {
namespace {

using nlohmann::json;

// The error `parse` throws, as the API answers it (a route's ApiError, or the SandboxError of
// the request reader it uses): it must have this status, code and field.
void expect_refusal(const std::function<void()>& parse, const std::string& field,
                    const std::string& code = "bad_request", unsigned status = 400) {
    auto expect = [&](const ApiError& e) {
        EXPECT_EQ(e.status(), status) << e.what();
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_EQ(e.field(), field) << e.what();
    };
    try {
        parse();
        ADD_FAILURE() << "accepted; expected " << code << " on '" << field << "'";
    } catch (const ApiError& e) {
        expect(e);
    } catch (const SandboxError& e) {
        expect(to_api_error(e));
    }
}

TEST(LifecycleBodies, PauseTakesOnlyABooleanSnapshot) {
    EXPECT_FALSE(parse_pause_body(json::object()));
    EXPECT_FALSE(parse_pause_body(nullptr));
    EXPECT_TRUE(parse_pause_body({{"snapshot", true}}));
    EXPECT_FALSE(parse_pause_body({{"snapshot", false}}));
    expect_refusal([] { parse_pause_body({{"snapshot", 1}}); }, "snapshot");
    expect_refusal([] { parse_pause_body({{"snapshot", "true"}}); }, "snapshot");
    expect_refusal([] { parse_pause_body({{"snapshot", true}, {"later", 1}}); }, "later");
    expect_refusal([] { parse_pause_body(json::array()); }, "");
    expect_refusal([] { parse_pause_body("snapshot"); }, "");
}

TEST(LifecycleBodies, ResumeTakesNoFields) {
    EXPECT_NO_THROW(check_resume_body(json::object()));
    EXPECT_NO_THROW(check_resume_body(nullptr));
    expect_refusal([] { check_resume_body({{"snapshot", true}}); }, "snapshot");
    expect_refusal([] { check_resume_body(json::array({1})); }, "");
}

TEST(ScreenshotQuery, ParsesEachParameterAndNamesTheBadOne) {
    auto options = parse_screenshot_query({{"format", "jpeg"},
                                           {"quality", "55"},
                                           {"width", "640"},
                                           {"height", "360"},
                                           {"cursor", "true"}});
    EXPECT_EQ(options.format, streaming::ImageFormat::jpeg);
    EXPECT_EQ(options.quality, 55);
    EXPECT_EQ(options.width, 640);
    EXPECT_EQ(options.height, 360);
    EXPECT_TRUE(options.composite_cursor);
    EXPECT_EQ(parse_screenshot_query({{"compression", "9"}}).png_compression, 9);
    auto defaults = parse_screenshot_query({});
    EXPECT_EQ(defaults.format, streaming::ImageFormat::png);
    EXPECT_FALSE(defaults.quality || defaults.width || defaults.height);
    EXPECT_FALSE(defaults.composite_cursor);

    expect_refusal([] { parse_screenshot_query({{"format", "gif"}}); }, "format");
    expect_refusal([] { parse_screenshot_query({{"quality", "high"}}); }, "quality");
    expect_refusal([] { parse_screenshot_query({{"width", "12px"}}); }, "width");
    expect_refusal([] { parse_screenshot_query({{"height", "99999999999"}}); }, "height");
    expect_refusal([] { parse_screenshot_query({{"compression", ""}}); }, "compression");
    expect_refusal([] { parse_screenshot_query({{"cursor", "yes"}}); }, "cursor");
    expect_refusal([] { parse_screenshot_query({{"scale", "2"}}); }, "scale");
}

TEST(ActionsQuery, DialectAndScreenshot) {
    auto query = parse_actions_query({{"dialect", "anthropic"}, {"screenshot", "1"}});
    EXPECT_EQ(query.dialect, input::Dialect::anthropic);
    EXPECT_TRUE(query.with_screenshot);
    query = parse_actions_query({});
    EXPECT_EQ(query.dialect, input::Dialect::native);
    EXPECT_FALSE(query.with_screenshot);
    EXPECT_EQ(parse_actions_query({{"dialect", "openai"}}).dialect, input::Dialect::openai);
    expect_refusal([] { parse_actions_query({{"dialect", "gemini"}}); }, "dialect");
    expect_refusal([] { parse_actions_query({{"screenshot", "please"}}); }, "screenshot");
    expect_refusal([] { parse_actions_query({{"format", "png"}}); }, "format");
}

TEST(CommandBody, TakesStdinOutAndReadsEachField) {
    auto command = parse_command_body(
        {{"cmd", "cat"}, {"stdin", "hello"}, {"timeout_s", 2.5}, {"env", {{"A", "1"}}}});
    EXPECT_EQ(command.stdin_bytes, "hello");
    EXPECT_EQ(command.params(), json({{"cmd", "cat"}, {"timeout_s", 2.5}, {"env", {{"A", "1"}}}}));
    EXPECT_EQ(command.reply_timeout(), std::chrono::milliseconds(17500));
    command = parse_command_body({{"argv", {"ls", "-l"}},
                                  {"cwd", "/tmp"},
                                  {"background", true},
                                  {"stream", false},
                                  {"timeout_s", nullptr}});
    EXPECT_EQ(command.params(),
              json({{"argv", {"ls", "-l"}}, {"cwd", "/tmp"}, {"background", true}}));
    EXPECT_EQ(command.reply_timeout(), std::chrono::milliseconds(75000));  // the agent's 60 s
}

TEST(CommandBody, NamesTheBadField) {
    expect_refusal([] { parse_command_body(json::array({"ls"})); }, "");
    expect_refusal([] { parse_command_body("ls"); }, "");
    expect_refusal([] { parse_command_body({{"cmd", "ls"}, {"shell", true}}); }, "shell");
    expect_refusal([] { parse_command_body({{"cmd", "cat"}, {"stdin", 5}}); }, "stdin");
    expect_refusal([] { parse_command_body({{"cmd", 5}}); }, "cmd");
    expect_refusal([] { parse_command_body({{"argv", "ls"}}); }, "argv");
    expect_refusal([] { parse_command_body({{"argv", {"ls", 1}}}); }, "argv[1]");
    expect_refusal([] { parse_command_body({{"cmd", "ls"}, {"env", {{"A", 1}}}}); }, "env.A");
    expect_refusal([] { parse_command_body({{"cmd", "ls"}, {"background", "no"}}); }, "background");
    expect_refusal([] { parse_command_body({{"cmd", "ls"}, {"timeout_s", "60"}}); }, "timeout_s");
    expect_refusal([] { parse_command_body({{"cmd", "ls"}, {"timeout_s", -1}}); }, "timeout_s");
    expect_refusal([] { parse_command_body({{"cmd", "ls"}, {"timeout_s", 0}}); }, "timeout_s");
    // The agent refuses more than a day: so does the server, for REST and MCP alike.
    expect_refusal([] { parse_command_body({{"cmd", "x"}, {"timeout_s", 1e12}}); }, "timeout_s");
}

TEST(KillProcessesBody, TakesNoFields) {
    EXPECT_NO_THROW(check_kill_processes_body(json::object()));
    EXPECT_NO_THROW(check_kill_processes_body(nullptr));
    expect_refusal([] { check_kill_processes_body({{"signal", 9}}); }, "");
    expect_refusal([] { check_kill_processes_body(json::array()); }, "");
}

TEST(FilesQuery, NeedsAPathAndNothingUnknown) {
    EXPECT_EQ(parse_files_path({{"path", "/tmp/a b"}, {"recursive", "true"}, {"mode", "644"}}),
              "/tmp/a b");
    expect_refusal([] { parse_files_path({}); }, "path");
    expect_refusal([] { parse_files_path({{"path", ""}}); }, "path");
    expect_refusal([] { parse_files_path({{"path", "/x"}, {"owner", "root"}}); }, "owner");
}

TEST(ClipboardBody, IsTextOnly) {
    EXPECT_EQ(parse_clipboard_body({{"text", "héllo"}}), "héllo");
    EXPECT_EQ(parse_clipboard_body({{"text", ""}}), "");
    expect_refusal([] { parse_clipboard_body(json::object()); }, "text");
    expect_refusal([] { parse_clipboard_body({{"text", 5}}); }, "text");
    expect_refusal([] { parse_clipboard_body({{"text", nullptr}}); }, "text");
    expect_refusal([] { parse_clipboard_body("text"); }, "");
    expect_refusal([] { parse_clipboard_body({{"text", "a"}, {"html", "<b>a</b>"}}); }, "html");
}

TEST(StreamQuery, ParsesAndValidatesTheSettings) {
    auto settings = parse_stream_query(
        {{"token", "t"}, {"codec", "h264"}, {"width", "800"}, {"fps", "15"}, {"quality", "50"}});
    EXPECT_EQ(settings.codec, streaming::StreamCodec::h264);
    EXPECT_EQ(settings.max_width, 800);
    EXPECT_EQ(settings.max_fps, 15);
    EXPECT_EQ(settings.quality, 50);
    // Settings between presets snap to the nearest (viewers asking nearly alike share one).
    EXPECT_EQ(parse_stream_query({{"quality", "55"}, {"fps", "14"}}).quality, 50);
    EXPECT_EQ(parse_stream_query({{"quality", "55"}, {"fps", "14"}}).max_fps, 15);
    EXPECT_EQ(parse_stream_query({}), streaming::StreamSettings{});
    expect_refusal([] { parse_stream_query({{"codec", "vp9"}}); }, "codec");
    expect_refusal([] { parse_stream_query({{"fps", "0"}}); }, "fps");
    expect_refusal([] { parse_stream_query({{"fps", "61"}}); }, "fps");
    expect_refusal([] { parse_stream_query({{"quality", "101"}}); }, "quality");
    expect_refusal([] { parse_stream_query({{"width", "wide"}}); }, "width");
    expect_refusal([] { parse_stream_query({{"scale", "1"}}); }, "scale");
}

TEST(PortNumber, IsOneTo65535) {
    EXPECT_EQ(parse_port_number("1"), 1);
    EXPECT_EQ(parse_port_number("8080"), 8080);
    EXPECT_EQ(parse_port_number("65535"), 65535);
    for (const char* bad : {"0", "65536", "-1", "80a", "", " 80", "99999999999999999999"})
        expect_refusal([bad] { parse_port_number(bad); }, "port");
}

TEST(JsonBodies, MalformedDeepOrMissing) {
    auto body = [](const std::string& text) {
        HttpRequest request{http::verb::post, "/", 11};
        request.body() = text;
        return request;
    };
    EXPECT_EQ(parse_body(body("{\"a\":[1,2]}"))["a"][1], 2);
    EXPECT_EQ(parse_body(body(""), true), json::object());
    expect_refusal([&] { parse_body(body("")); }, "");
    expect_refusal([&] { parse_body(body("{\"a\":")); }, "", "malformed_json");
    expect_refusal([&] { parse_body(body("[1e400]")); }, "", "malformed_json");
    auto nested = [](std::size_t levels) {
        return std::string(levels, '[') + std::string(levels, ']');
    };
    EXPECT_NO_THROW(parse_body(body(nested(kMaxJsonDepth))));  // at most 64 levels, as documented
    expect_refusal([&] { parse_body(body(nested(kMaxJsonDepth + 1))); }, "", "too_deep");
    expect_refusal([&] { parse_body(body("{\"cmd\":\"a\xff\"}")); }, "cmd", "invalid_utf8");
}

}  // namespace
}  // namespace deskbox::server::routes
