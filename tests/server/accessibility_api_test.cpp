// The accessibility tree end to end (issue 32): the real deskboxd, a `desktop` container and its
// applications read through AT-SPI by the agent: xfce4-terminal's and Mousepad's trees, a Firefox
// page's button found by name and pressed (its effect seen in the window title), a text field's
// value set and read back, the button's bounds locating its red pixels in a screenshot, an action
// aimed at {"role", "name"}; `minimal` (no libatspi) refuses clearly; bad input is a 400 naming
// the field.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/server/deskboxd_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

// A page with a big red button (its pixels are found by its bounds) that counts its presses in
// the title, and a labelled text field.
const char* const kPage = R"HTML(<!DOCTYPE html>
<html><head><title>A11y page</title><style>
body { margin: 0; background: #ffffff; }
#paint { position: absolute; left: 300px; top: 200px; width: 240px; height: 90px;
         background: #ff0000; border: none; color: #ff0000; font-size: 20px; }
#who { position: absolute; left: 300px; top: 60px; width: 300px; }
</style></head><body>
<input id="who" type="text" aria-label="Your name">
<button id="paint" onclick="document.title = 'Pressed ' + (++window.presses)" >
                          Paint it</ button><script> window.presses = 0;</script>
</body></html>
)HTML";

struct Desktop {
    Server& s;
    std::string base;

    Answer find(const json& query) { return s.post(base + "/accessibility/find", query); }
    // The first match of `query`, or null while there is none.
    json first(const json& query) {
        auto a = find(query);
        if (a.status != 200) return nullptr;
        auto matches = a.js()["matches"];
        return matches.empty() ? json() : matches[0];
    }
    std::string titles() {
        std::string all;
        const json windows = s.get(base + "/windows").js();
        for (const auto& w : windows.value("windows", json::array()))
            all += w.value("title", "") + "\n";
        return all;
    }
};

bool tree_has_role(const json& node, const std::string& role) {
    if (node.value("role", "") == role) return true;
    for (const auto& child : node.value("children", json::array()))
        if (tree_has_role(child, role)) return true;
    return false;
}

TEST(Accessibility, DesktopAppsTreesFindAndAct) {
    if (!template_built("desktop"))
        GTEST_SKIP() << "template 'desktop' not built: run images/build.py desktop";
    Server s;
    auto created =
        s.post("/v1/sandboxes", {{"template", "desktop"}, {"limits", {{"memory_mb", 2048}}}});
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string id = created.js()["id"];
    Desktop d{s, "/v1/sandboxes/" + id};

    // xfce4-terminal: a GTK application, its terminal widget in the tree of all windows.
    start(s, id, "xfce4-terminal");
    json tree;
    EXPECT_TRUE(eventually(
        [&] {
            auto a = s.get(d.base + "/accessibility?scope=all&app=xfce4-terminal");
            if (a.status != 200) return false;
            tree = a.js();
            for (const auto& window : tree["windows"])
                if (tree_has_role(window, "terminal")) return true;
            return false;
        },
        60s))
        << tree.dump(1).substr(0, 4000) << s.get(d.base + "/accessibility?scope=all").body;
    ASSERT_FALSE(tree["windows"].empty());
    const json& window = tree["windows"][0];
    EXPECT_EQ(window["role"], "frame");
    EXPECT_TRUE(window.contains("pid"));
    EXPECT_TRUE(window.contains("bounds"));
    EXPECT_FALSE(window["ref"].get<std::string>().empty());

    // Mousepad: its editor's text set through EditableText and read back.
    start(s, id, "mousepad");
    json editor;
    ASSERT_TRUE(eventually(
        [&] {
            editor = d.first({{"app", "mousepad"}, {"role", "text"}, {"states", {"editable"}}});
            return !editor.is_null();
        },
        60s))
        << s.get(d.base + "/accessibility?scope=all&app=mousepad").body.substr(0, 4000);
    auto set = s.post(
        d.base + "/accessibility/act",
        {{"ref", editor["ref"]}, {"action", "set_value"}, {"value", "written through AT-SPI"}});
    ASSERT_EQ(set.status, 200u) << set.body;
    EXPECT_FALSE(set.js().contains("via")) << "GTK takes EditableText: " << set.body;
    EXPECT_TRUE(eventually(
        [&] {
            json again = d.first({{"app", "mousepad"}, {"role", "text"}, {"states", {"editable"}}});
            return again.is_object() && again.value("text", "") == "written through AT-SPI";
        },
        10s));

    // Firefox: a page's button found by name, pressed, and its bounds on the screenshot.
    auto written = s.call(http::verb::put, d.base + "/files?path=/tmp/a11y.html", kPage);
    ASSERT_EQ(written.status, 200u) << written.body;
    start(s, id, "firefox-esr --new-instance file:///tmp/a11y.html");
    json button;
    ASSERT_TRUE(eventually(
        [&] {
            button = d.first({{"role", "push button"}, {"name", "Paint it"}, {"app", "firefox"}});
            return button.is_object() && button.contains("bounds");
        },
        180s))
        << d.titles()
        << s.get(d.base + "/accessibility?scope=all&max_depth=6").body.substr(0, 4000);
    EXPECT_NE(std::find(button["states"].begin(), button["states"].end(), "showing"),
              button["states"].end())
        << button;

    // The default scope: the focused window only, which is the newest, Firefox's.
    json focused;
    EXPECT_TRUE(eventually(
        [&] {
            auto a = s.get(d.base + "/accessibility?max_depth=1");
            focused = a.js();
            return a.status == 200 && focused["windows"].size() == 1 &&
                   focused["windows"][0].value("app", "") == "Firefox";
        },
        30s))
        << focused.dump().substr(0, 2000);
    if (focused["windows"].size() == 1) {
        EXPECT_NE(std::find(focused["windows"][0]["states"].begin(),
                            focused["windows"][0]["states"].end(), "active"),
                  focused["windows"][0]["states"].end());
        bool stopped = false;  // some child of the window has children max_depth left out
        for (const auto& child : focused["windows"][0]["children"]) {
            EXPECT_TRUE(child["children"].empty()) << child;
            stopped = stopped || child.value("children_truncated", false);
        }
        EXPECT_TRUE(stopped) << focused.dump().substr(0, 2000);
    }

    auto pressed =
        s.post(d.base + "/accessibility/act", {{"ref", button["ref"]}, {"action", "press"}});
    ASSERT_EQ(pressed.status, 200u) << pressed.body;
    EXPECT_EQ(pressed.js()["action"], "press");
    EXPECT_TRUE(eventually([&] { return d.titles().find("Pressed 1") != std::string::npos; }, 20s))
        << d.titles();

    // Bounds in API pixels locate the button's red pixels in a screenshot, and only them.
    auto shot = s.get(d.base + "/screenshot?format=png");
    ASSERT_EQ(shot.status, 200u);
    cv::Mat img =
        cv::imdecode(std::vector<uchar>(shot.body.begin(), shot.body.end()), cv::IMREAD_COLOR);
    ASSERT_FALSE(img.empty());
    const json& box = button["bounds"];
    const int x = box["x"], y = box["y"], w = box["width"], h = box["height"];
    auto red = [&](int px, int py) {
        cv::Vec3b bgr = img.at<cv::Vec3b>(py, px);
        return bgr[2] > 200 && bgr[1] < 60 && bgr[0] < 60;
    };
    EXPECT_EQ(w, 240);
    EXPECT_EQ(h, 90);
    EXPECT_TRUE(red(x + w / 2, y + h / 2)) << box;
    EXPECT_TRUE(red(x, y)) << box;                  // its first pixel
    EXPECT_TRUE(red(x + w - 1, y + h - 1)) << box;  // its last pixel
    EXPECT_FALSE(red(x - 1, y + h / 2)) << box;     // just outside it
    EXPECT_FALSE(red(x + w / 2, y + h)) << box;

    // The text field: its value set and read back.
    json field = d.first({{"role", "entry"}, {"name", "Your name"}, {"app", "firefox"}});
    ASSERT_TRUE(field.is_object())
        << s.get(d.base + "/accessibility?scope=all&app=firefox").body.substr(0, 4000);
    auto typed = s.post(d.base + "/accessibility/act",
                        {{"ref", field["ref"]}, {"action", "set_value"}, {"value", "Ada"}});
    ASSERT_EQ(typed.status, 200u) << typed.body;
    // Firefox's content ignores EditableText: the host typed it.
    EXPECT_EQ(typed.js()["via"], "keyboard") << typed.body;
    EXPECT_EQ(typed.js()["node"]["text"], "Ada") << typed.body;
    EXPECT_TRUE(eventually(
        [&] {
            json again = d.first({{"role", "entry"}, {"name", "Your name"}, {"app", "firefox"}});
            return again.is_object() && again.value("text", "") == "Ada";
        },
        10s));

    // A regex find, and an action aimed at {"role", "name"}.
    json by_regex = d.first({{"role", "push_button"}, {"name", "^Paint"}, {"name_match", "regex"}});
    ASSERT_TRUE(by_regex.is_object());
    EXPECT_EQ(by_regex["ref"], button["ref"]);
    auto clicked = s.post(
        d.base + "/actions",
        {{"actions",
          {{{"type", "click"}, {"target", {{"role", "push button"}, {"name", "Paint it"}}}}}}});
    ASSERT_EQ(clicked.status, 200u) << clicked.body;
    EXPECT_EQ(clicked.js()["results"][0]["target"]["ref"], button["ref"]) << clicked.body;
    EXPECT_TRUE(eventually([&] { return d.titles().find("Pressed 2") != std::string::npos; }, 20s))
        << d.titles();
    auto missing = s.post(
        d.base + "/actions",
        {{"actions",
          {{{"type", "click"},
            {"target", {{"role", "push button"}, {"name", "No such"}, {"timeout_ms", 300}}}}}}});
    EXPECT_EQ(missing.status, 422u) << missing.body;
    EXPECT_EQ(missing.js()["error"]["field"], "actions[0].target") << missing.body;

    // Bad input on a live tree: a reference never issued, an unknown role or state.
    auto unknown = s.post(d.base + "/accessibility/act",
                          {{"ref", ":1.999/org/a11y/atspi/accessible/1"}, {"action", "press"}});
    EXPECT_EQ(unknown.status, 400u) << unknown.body;
    EXPECT_EQ(unknown.js()["error"]["field"], "ref") << unknown.body;
    auto role = d.find({{"role", "pushbutton"}});
    EXPECT_EQ(role.status, 400u) << role.body;
    EXPECT_EQ(role.js()["error"]["field"], "role") << role.body;
    auto state = d.find({{"role", "push button"}, {"states", {"shiny"}}});
    EXPECT_EQ(state.status, 400u) << state.body;
    EXPECT_EQ(state.js()["error"]["field"], "states[0]") << state.body;
    auto action =
        s.post(d.base + "/accessibility/act", {{"ref", button["ref"]}, {"action", "fly"}});
    EXPECT_EQ(action.status, 400u) << action.body;
    EXPECT_EQ(action.js()["error"]["field"], "action") << action.body;

    // The same through MCP: find_element, then act_on_element on its ref.
    const auto headers = open_mcp_session(s, "a11y-test");
    ASSERT_TRUE(headers.count("Mcp-Session-Id"));
    auto tool = [&](const std::string& name, json arguments) {
        arguments["sandbox_id"] = id;
        const json request = {{"jsonrpc", "2.0"},
                              {"id", 2},
                              {"method", "tools/call"},
                              {"params", {{"name", name}, {"arguments", arguments}}}};
        const Answer a = s.call(http::verb::post, "/mcp", request.dump(), headers);
        EXPECT_EQ(a.status, 200u) << a.body;
        return a.js()["result"];
    };
    const json found = tool("find_element", {{"role", "push button"}, {"name", "Paint it"}});
    ASSERT_EQ(found["isError"], false) << found;
    ASSERT_EQ(found["structuredContent"]["matches"].size(), 1u) << found;
    EXPECT_EQ(found["structuredContent"]["matches"][0]["bounds"], button["bounds"]);
    EXPECT_NE(found["content"][0]["text"].get<std::string>().find("push button \"Paint it\""),
              std::string::npos)
        << found;
    const json acted = tool("act_on_element", {{"ref", button["ref"]}, {"action", "press"}});
    ASSERT_EQ(acted["isError"], false) << acted;
    EXPECT_TRUE(eventually([&] { return d.titles().find("Pressed 3") != std::string::npos; }, 20s))
        << d.titles();

    EXPECT_EQ(s.del(d.base).status, 200u);
}

// `minimal` has no libatspi: the agent loads without it and says so; the request's own mistakes
// are still named first.
TEST(Accessibility, MinimalTemplateRefusesClearlyAndBadInputNamesTheField) {
    REQUIRE_TEMPLATE();
    Server s;
    auto created = s.post("/v1/sandboxes", json::object());
    ASSERT_EQ(created.status, 201u) << created.body << s.log();
    const std::string base = "/v1/sandboxes/" + created.js()["id"].get<std::string>();

    auto tree = s.get(base + "/accessibility");
    EXPECT_EQ(tree.status, 422u) << tree.body;
    EXPECT_NE(tree.js()["error"]["message"].get<std::string>().find(
                  "this template has no accessibility support: libatspi not installed"),
              std::string::npos)
        << tree.body;
    auto act = s.post(base + "/accessibility/act", {{"ref", ":1.2/x"}, {"action", "press"}});
    EXPECT_EQ(act.status, 422u) << act.body;
    // A click aimed at an element: looked for until its timeout, then not found, saying why.
    auto aimed = s.post(
        base + "/actions",
        {{"actions",
          {{{"type", "click"}, {"target", {{"role", "push button"}, {"timeout_ms", 300}}}}}}});
    EXPECT_EQ(aimed.status, 422u) << aimed.body;
    EXPECT_EQ(aimed.js()["error"]["code"], "target_not_found") << aimed.body;
    EXPECT_NE(aimed.body.find("libatspi not installed"), std::string::npos) << aimed.body;

    struct Bad {
        Answer answer;
        const char* field;
    };
    std::vector<Bad> bad = {
        {s.get(base + "/accessibility?max_depth=deep"), "max_depth"},
        {s.get(base + "/accessibility?scope=mine"), "scope"},
        {s.get(base + "/accessibility?colour=red"), "colour"},
        {s.post(base + "/accessibility/find", {{"name", "(unclosed"}, {"name_match", "regex"}}),
         "name"},
        {s.post(base + "/accessibility/find", {{"name", 5}}), "name"},
        {s.post(base + "/accessibility/find", {{"role", "push button"}, {"states", "focused"}}),
         "states"},
        {s.post(base + "/accessibility/find", {{"name", "OK"}, {"name_match", "fuzzy"}}),
         "name_match"},
        {s.post(base + "/accessibility/find", json::object()), "role"},
        {s.post(base + "/accessibility/find", {{"role", "push button"}, {"max_results", 0}}),
         "max_results"},
        {s.post(base + "/accessibility/act", {{"action", "press"}}), "ref"},
        {s.post(base + "/accessibility/act", {{"ref", ":1.2/x"}, {"action", 3}}), "action"},
        {s.post(base + "/accessibility/act",
                {{"ref", ":1.2/x"}, {"action", "press"}, {"value", "x"}}),
         "value"},
        {s.post(base + "/accessibility/act",
                {{"ref", ":1.2/x"}, {"action", "press"}, {"extra", 1}}),
         "extra"},
        {s.post(base + "/actions", {{"actions", {{{"type", "click"}, {"target", {{"role", 7}}}}}}}),
         "actions[0].target.role"},
        {s.post(base + "/actions",
                {{"actions",
                  {{{"type", "click"}, {"target", {{"role", "push button"}, {"size", 2}}}}}}}),
         "actions[0].target.size"},
    };
    for (const auto& [answer, field] : bad) {
        EXPECT_EQ(answer.status, 400u) << field << ": " << answer.body;
        EXPECT_EQ(answer.js()["error"]["field"], field) << answer.body;
    }
    auto body = s.call(http::verb::post, base + "/accessibility/find", "[1]");
    EXPECT_EQ(body.status, 400u) << body.body;
    EXPECT_EQ(s.del(base).status, 200u);
}

}  // namespace
}  // namespace deskbox
