// The tools/list catalog: names, descriptions and input schemas.
#include "server/mcp/mcp_server.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {

json sandbox_id_schema() {
    return {{"type", "string"},
            {"description",
             "The sandbox to act on; default: the session's (from create_sandbox or ?sandbox=)"}};
}

}  // namespace

const json& mcp_tools() {
    static const json tools = [] {
        auto described = [](json schema, const char* description) {
            schema["description"] = description;
            return schema;
        };
        json coordinate = {{"type", "array"},
                           {"items", {{"type", "integer"}, {"minimum", 0}}},
                           {"minItems", 2},
                           {"maxItems", 2}};
        // Anthropic's computer tool (computer_20251124), verbatim.
        json computer_properties = {
            {"action",
             {{"type", "string"},
              {"enum",
               {"key", "hold_key", "type", "cursor_position", "mouse_move", "left_mouse_down",
                "left_mouse_up", "left_click", "left_click_drag", "right_click", "middle_click",
                "double_click", "triple_click", "scroll", "wait", "screenshot", "zoom"}},
              {"description", "The action to perform."}}},
            {"coordinate", described(coordinate, "(x, y): where to move, click or scroll.")},
            {"start_coordinate", described(coordinate, "(x, y): where left_click_drag starts.")},
            {"text",
             {{"type", "string"},
              {"description",
               "type: the text; key/hold_key: xdotool-style keys (\"ctrl+s\"); clicks and "
               "scroll: modifier keys held (\"shift\")."}}},
            {"duration",
             {{"type", "number"},
              {"minimum", 0},
              {"description", "Seconds, for hold_key and wait."}}},
            {"scroll_direction", {{"type", "string"}, {"enum", {"up", "down", "left", "right"}}}},
            {"scroll_amount", {{"type", "integer"}, {"minimum", 1}, {"description", "Notches."}}},
            {"region",
             {{"type", "array"},
              {"items", {{"type", "integer"}, {"minimum", 0}}},
              {"minItems", 4},
              {"maxItems", 4},
              {"description", "zoom: [x0, y0, x1, y1], the corners of the region to see."}}},
            {"sandbox_id", sandbox_id_schema()}};
        json list = json::array();
        list.push_back(
            {{"name", "computer"},
             {"title", "Computer"},
             {"description",
              "Use the mouse and keyboard of a Linux desktop and see its screen. The result is "
              "a screenshot taken after the action (for zoom: the region's image)."},
             {"inputSchema",
              {{"type", "object"},
               {"properties", computer_properties},
               {"required", {"action"}}}}});
        list.push_back(
            {{"name", "computer_tool_uses"},
             {"title", "Run a Claude turn's computer tool_use blocks"},
             {"description",
              "For agent loops relaying Claude: the tool_use blocks of one assistant turn, sent "
              "whole (computer_toolset_20260801 members, or computer_2025xxxx blocks with "
              "input.action), run in order. structuredContent.tool_results holds one "
              "tool_result per block, by tool_use_id, to send back as the next user message."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"tool_uses",
                  {{"type", "array"},
                   {"minItems", 1},
                   {"items", {{"type", "object"}}},
                   {"description", "The turn's tool_use blocks, as the Messages API sent them."}}},
                 {"screenshot",
                  {{"type", "boolean"},
                   {"description", "Also end the last tool_result with the screen after them."}}},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"tool_uses"}}}}});
        list.push_back({{"name", "screenshot"},
                        {"title", "Screenshot"},
                        {"description",
                         "The sandbox's screen now, at the size the computer tool's coordinates "
                         "are in (the sandbox's api_resolution, if it has one)."},
                        {"inputSchema",
                         {{"type", "object"},
                          {"properties",
                           {{"format", {{"type", "string"}, {"enum", {"png", "jpeg", "webp"}}}},
                            {"sandbox_id", sandbox_id_schema()}}}}}});
        list.push_back(
            {{"name", "run_command"},
             {"title", "Run a shell command"},
             {"description",
              "Runs a bash command line in the sandbox as its user; answers the exit code, "
              "stdout and stderr. With a progressToken, each line it prints comes as a progress "
              "notification while it runs; cancelling the request kills the command."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"command", {{"type", "string"}}},
                 {"timeout_s",
                  {{"type", "number"},
                   {"exclusiveMinimum", 0},
                   {"maximum", 86400},
                   {"description",
                    "Seconds before it is killed (default 60), as POST /commands."}}},
                 {"background", {{"type", "boolean"}, {"description", "Start it and return."}}},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"command"}}}}});
        list.push_back(
            {{"name", "read_file"},
             {"title", "Read a file or list a directory"},
             {"description",
              "A file of the sandbox: text as text, other bytes as a blob; a directory: its "
              "entries, one a line (directories end in /), as GET /files answers."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"path", {{"type", "string"}}}, {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"path"}}}}});
        list.push_back({{"name", "write_file"},
                        {"title", "Write a file"},
                        {"description", "Creates or replaces a file (and its parent directories)."},
                        {"inputSchema",
                         {{"type", "object"},
                          {"properties",
                           {{"path", {{"type", "string"}}},
                            {"content", {{"type", "string"}}},
                            {"encoding", {{"type", "string"}, {"enum", {"utf-8", "base64"}}}},
                            {"sandbox_id", sandbox_id_schema()}}},
                          {"required", {"path", "content"}}}}});
        list.push_back(
            {{"name", "create_sandbox"},
             {"title", "Create a sandbox"},
             {"description",
              "Starts a new desktop; it becomes this session's sandbox. Same fields as POST "
              "/v1/sandboxes."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"template", {{"type", "string"}}},
                 {"runtime",
                  {{"type", "string"},
                   {"description",
                    "A runtime this server has (GET /v1/templates lists each template's); "
                    "default: the server's."}}},
                 {"resolution",
                  {{"type", "array"},
                   {"items", {{"type", "integer"}}},
                   {"minItems", 2},
                   {"maxItems", 2}}},
                 {"timeout_s", {{"type", "integer"}, {"minimum", 1}}},
                 {"network", {{"description", "true, false or {allow, deny}"}}},
                 {"snapshot",
                  {{"type", "string"},
                   {"description",
                    "Start from this snapshot (the snapshot tool); its template, runtime and "
                    "resolution are the snapshot's."}}},
                 {"auto_resume",
                  {{"type", "boolean"},
                   {"description",
                    "Paused at its timeout, it resumes on the next call that needs it."}}}}}}}});
        list.push_back(
            {{"name", "kill_sandbox"},
             {"title", "Kill a sandbox"},
             {"description",
              "Ends the sandbox and removes everything it had; structuredContent is the sandbox "
              "as it ended (state killed)."},
             {"inputSchema",
              {{"type", "object"}, {"properties", {{"sandbox_id", sandbox_id_schema()}}}}}});
        list.push_back(
            {{"name", "snapshot"},
             {"title", "Snapshot a sandbox"},
             {"description",
              "Saves the sandbox under a name; create_sandbox with snapshot NAME starts new "
              "sandboxes from it (a microVM's with its programs running, a container's with its "
              "files). As POST /v1/sandboxes/{id}/snapshots."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"name",
                  {{"type", "string"},
                   {"pattern", "^[a-z0-9][a-z0-9_.-]{0,62}$"},
                   {"description", "Unique on the server."}}},
                 {"metadata", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"name"}}}}});
        list.push_back(
            {{"name", "fork"},
             {"title", "Fork a sandbox"},
             {"description",
              "Starts count copies of the sandbox as it is now and answers their ids; the "
              "session's sandbox stays the one forked (give a copy's id as sandbox_id)."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"count", {{"type", "integer"}, {"minimum", 1}, {"maximum", 16}, {"default", 1}}},
                 {"metadata",
                  {{"type", "object"},
                   {"additionalProperties", {{"type", "string"}}},
                   {"description", "The copies' metadata (default the source's)."}}},
                 {"timeout_s",
                  {{"type", "integer"},
                   {"minimum", 1},
                   {"description", "The copies' timeout (default the source's)."}}},
                 {"sandbox_id", sandbox_id_schema()}}}}}});
        json region = {{"type", "array"},
                       {"items", {{"type", "integer"}, {"minimum", 0}}},
                       {"minItems", 4},
                       {"maxItems", 4},
                       {"description", "[x, y, width, height]; default the whole screen."}};
        list.push_back(
            {{"name", "wait_for"},
             {"title", "Wait for the screen"},
             {"description",
              "Waits until a text shows on the screen (until=text), goes away (gone), the screen "
              "changes (change) or stops changing (stable); answers as soon as it does, or "
              "matched=false at timeout_ms. Cheaper than screenshots in a loop."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"until", {{"type", "string"}, {"enum", {"text", "gone", "change", "stable"}}}},
                 {"text", {{"type", "string"}}},
                 {"region", region},
                 {"timeout_ms", {{"type", "integer"}, {"minimum", 0}, {"maximum", 120000}}},
                 {"stable_ms", {{"type", "integer"}, {"minimum", 1}, {"maximum", 60000}}},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"until"}}}}});
        list.push_back(
            {{"name", "find_on_screen"},
             {"title", "Find text on the screen"},
             {"description",
              "Where a text is on the screen (OCR): boxes and centres to click, in reading "
              "order."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"text", {{"type", "string"}}},
                 {"exact", {{"type", "boolean"}, {"description", "Whole words, case-sensitive."}}},
                 {"region", region},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"text"}}}}});
        list.push_back(
            {{"name", "read_screen"},
             {"title", "Read the screen's text"},
             {"description", "The text on the screen (OCR), line by line."},
             {"inputSchema",
              {{"type", "object"},
               {"properties", {{"region", region}, {"sandbox_id", sandbox_id_schema()}}}}}});
        json accessible_filters = {
            {"role",
             {{"type", "string"},
              {"description", "AT-SPI role: \"push button\", \"entry\", \"text\", ..."}}},
            {"name", {{"type", "string"}}},
            {"name_match", {{"type", "string"}, {"enum", {"exact", "substring", "regex"}}}},
            {"states",
             {{"type", "array"},
              {"items", {{"type", "string"}}},
              {"description", "States it must have: \"focused\", \"showing\", ..."}}},
            {"app", {{"type", "string"}, {"description", "Only this application (firefox)."}}},
            {"sandbox_id", sandbox_id_schema()}};
        list.push_back(
            {{"name", "accessibility_tree"},
             {"title", "Read the accessibility tree"},
             {"description",
              "The desktop's AT-SPI tree (GTK apps, Firefox): each element's role, name, states, "
              "bounds in screen coordinates and ref, for the focused window or all windows. "
              "Finds buttons and fields by name, not pixels."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"scope", {{"type", "string"}, {"enum", {"focused", "all"}}}},
                 {"app", {{"type", "string"}}},
                 {"max_depth", {{"type", "integer"}, {"minimum", 0}, {"maximum", 200}}},
                 {"visible_only", {{"type", "boolean"}}},
                 {"sandbox_id", sandbox_id_schema()}}}}}});
        list.push_back(
            {{"name", "find_element"},
             {"title", "Find accessible elements"},
             {"description",
              "Accessible elements by role, name (exact, substring or regex) and states: their "
              "ref (for act_on_element), bounds and centre to click."},
             {"inputSchema", {{"type", "object"}, {"properties", accessible_filters}}}});
        list.push_back(
            {{"name", "act_on_element"},
             {"title", "Act on an accessible element"},
             {"description",
              "Invokes an action on an element found by find_element or accessibility_tree: "
              "press, focus, set_value (a text field's text, a slider's number) or select."},
             {"inputSchema",
              {{"type", "object"},
               {"properties",
                {{"ref", {{"type", "string"}}},
                 {"action", {{"type", "string"}}},
                 {"value", {{"description", "set_value: a string or a number."}}},
                 {"sandbox_id", sandbox_id_schema()}}},
               {"required", {"ref", "action"}}}}});
        list.push_back({{"name", "list_sandboxes"},
                        {"title", "List sandboxes"},
                        {"description", "The sandboxes this session may use, with their state."},
                        {"inputSchema", {{"type", "object"}, {"properties", json::object()}}}});
        for (auto& tool : list) {
            const std::string name = tool["name"];
            const bool reads = name == "screenshot" || name == "read_file" ||
                               name == "list_sandboxes" || name == "wait_for" ||
                               name == "find_on_screen" || name == "read_screen" ||
                               name == "accessibility_tree" || name == "find_element";
            tool["annotations"] = {{"readOnlyHint", reads},
                                   {"destructiveHint", name == "kill_sandbox"},
                                   {"openWorldHint", false}};
        }
        return list;
    }();
    return tools;
}

}  // namespace deskbox::server
