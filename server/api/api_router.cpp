#include "server/api/api_router.hpp"

#include <malloc.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <set>

#include "server/api/api_routes.hpp"
#include "server/api/http_util.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {
// 400 invalid_utf8 naming where: the path, a query parameter or a header. Cookie is left out:
// a browser sends every cookie of the host name, also those of other programs on it.
void check_request_utf8(const HttpRequest& request, const std::string& path,
                        const std::map<std::string, std::string>& query,
                        const std::string& query_key) {
    check_utf8(path, "path", "the path");
    check_utf8(query_key, "key", "query parameter key");
    for (const auto& [name, value] : query) {
        check_utf8(name, "query", "a query parameter name");
        check_utf8(value, name, "query parameter " + name);
    }
    for (const auto& header : request) {
        if (header.name() == http::field::cookie) continue;
        std::string name(header.name_string());
        check_utf8(std::string_view(header.value().data(), header.value().size()), name,
                   "header " + name);
    }
}
}  // namespace

ApiRouter::ApiRouter(SandboxManager& manager, ApiOptions options)
    : manager_(manager), options_(std::move(options)) {}

bool ApiRouter::authorised(const HttpRequest& request, const std::string& query_key) const {
    if (options_.api_keys.empty()) return true;
    std::string given = query_key;
    if (auto it = request.find(http::field::authorization); it != request.end()) {
        std::string value(it->value());
        if (value.rfind("Bearer ", 0) == 0) given = value.substr(7);
    }
    if (given.empty()) {
        if (auto it = request.find("X-API-Key"); it != request.end())
            given = std::string(it->value());
    }
    bool ok = false;
    for (const auto& key : options_.api_keys) ok |= constant_time_equal(given, key);
    return ok;
}

McpAccess ApiRouter::mcp_access(const HttpRequest& request,
                                const std::map<std::string, std::string>& query,
                                const std::string& query_key) const {
    allow_only(query, {"sandbox", "token"});
    McpAccess access;
    if (auto it = query.find("sandbox"); it != query.end()) access.initial = it->second;
    if (authorised(request, query_key) && (!options_.api_keys.empty() || !query.count("token"))) {
        access.full = true;
        return access;
    }
    if (!access.initial.empty()) {
        auto sandbox = manager_.find(access.initial);
        if (sandbox_access(request, *sandbox, query, query_key) == Access::control) {
            access.sandbox = access.initial;
            return access;
        }
    }
    throw ApiError(401, "unauthorized",
                   "missing or wrong API key (Authorization: Bearer KEY), or ?sandbox=ID with that "
                   "sandbox's control token");
}

HttpResponse ApiRouter::handle(HttpExchange& exchange) {
    HttpRequest& request = exchange.request;
    metrics_.count_request();
    bool mcp = false;  // its clients read JSON-RPC errors, also for what fails before it
    try {
        std::string target(request.target());
        auto qmark = target.find('?');
        std::string path = url_decode(target.substr(0, qmark), false);
        mcp = path == "/mcp";
        auto query = qmark == std::string::npos
                         ? std::map<std::string, std::string>{}
                         : parse_query(std::string_view(target).substr(qmark + 1));
        // A browser cannot put our key in a header of a page load, an <img> or a WebSocket:
        // `key` in the query counts as the API key too (then it is not a query parameter).
        std::string query_key;
        if (auto it = query.find("key"); it != query.end()) {
            query_key = it->second;
            query.erase(it);
        }
        // An exposed port's program gets the request as sent; our own routes are UTF-8 only.
        if (auto port = port_route(exchange, path, query, query_key)) return std::move(*port);
        check_request_utf8(request, path, query, query_key);
        const ApiRoute* known = match_api_route(path);
        if (!known) throw ApiError(404, "not_found", "no such endpoint: " + path.substr(0, 256));
        bool allowed = false;
        for (auto method : known->methods) allowed |= request.method() == method;
        if (!allowed) {
            std::string list;
            for (auto method : known->methods)
                list += (list.empty() ? "" : ", ") + std::string(http::to_string(method));
            const ApiError refusal(405, "method_not_allowed",
                                   std::string(request.method_string()) + " is not allowed on " +
                                       std::string(known->path) + " (allowed: " + list + ")");
            auto answer = mcp ? McpServer::error_answer(refusal)
                              : json_error(405, refusal.code(), refusal.what());
            answer.set(http::field::allow, list);
            metrics_.count_error("method_not_allowed");
            return answer;
        }
        if (auto viewer = viewer_route(exchange, path, query, query_key)) return std::move(*viewer);
        if (path == "/mcp") return mcp_.handle(request, mcp_access(request, query, query_key));
        if (path == "/v1/openapi.json") {
            HttpResponse res{http::status::ok, 11};
            res.set(http::field::content_type, "application/json");
            res.body() = std::string(openapi_document());
            return res;
        }
        if (path != "/healthz" && !authorised(request, query_key))
            throw ApiError(401, "unauthorized",
                           "missing or wrong API key (Authorization: Bearer KEY)");
        return route(request, path, query);
    } catch (const ApiError& e) {
        metrics_.count_error(e.code());
        if (mcp) return McpServer::error_answer(e);
        return json_error(e.status(), e.code(), e.what(), e.field());
    } catch (const std::exception& e) {
        metrics_.count_error("internal");
        return json_error(500, "internal", e.what());
    }
}

std::string ApiRouter::egress_metrics() const {
    // Per sandbox: connections by decision and destination (the busiest 20 names, so a sandbox
    // cannot blow up the label set), bytes each way, DNS answers.
    std::string connections =
        "# HELP deskbox_egress_connections_total Sandbox egress connections by decision and "
        "destination (busiest 20 per sandbox).\n# TYPE deskbox_egress_connections_total counter\n";
    std::string bytes =
        "# HELP deskbox_egress_bytes_total Bytes a sandbox sent out and got back.\n"
        "# TYPE deskbox_egress_bytes_total counter\n";
    std::string dns =
        "# HELP deskbox_dns_queries_total Sandbox DNS queries answered and refused.\n"
        "# TYPE deskbox_dns_queries_total counter\n";
    auto label = [](const std::string& text) {
        std::string out;
        for (char c : text) {
            if (c == '"' || c == '\\') out += '\\';
            if (c == '\n') {
                out += "\\n";
                continue;
            }
            out += c;
        }
        return out;
    };
    for (const auto& sandbox : manager_.list()) {
        auto net = sandbox->network();
        if (!net || !net->has_interface()) continue;
        const std::string id = "sandbox=\"" + label(sandbox->id()) + "\"";
        for (const auto& [name, c] : net->top_destinations(20))
            for (auto [decision, n] :
                 {std::pair{"allowed", c.allowed}, std::pair{"blocked", c.blocked}})
                if (n)
                    connections += "deskbox_egress_connections_total{" + id + ",decision=\"" +
                                   decision + "\",destination=\"" + label(name) + "\"} " +
                                   std::to_string(n) + "\n";
        auto t = net->totals();
        bytes += "deskbox_egress_bytes_total{" + id + ",direction=\"out\"} " +
                 std::to_string(t.bytes_out) + "\n";
        bytes += "deskbox_egress_bytes_total{" + id + ",direction=\"in\"} " +
                 std::to_string(t.bytes_in) + "\n";
        dns += "deskbox_dns_queries_total{" + id + ",decision=\"answered\"} " +
               std::to_string(t.dns_answered) + "\n";
        dns += "deskbox_dns_queries_total{" + id + ",decision=\"refused\"} " +
               std::to_string(t.dns_refused) + "\n";
    }
    return connections + bytes + dns;
}

namespace {

// One metric family in Prometheus' text format: HELP, TYPE, then its sample lines.
std::string metric_family(const std::string& name, const std::string& help, const char* type,
                          const std::string& samples) {
    return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + samples;
}

}  // namespace

std::string ApiRouter::process_metrics() const {
    // What a leak or a fragmenting heap looks like from outside: resident memory, the heap's
    // own view of what is in use and what it holds free, fds and threads.
    std::string out;
    auto gauge = [&](const std::string& name, const char* help, std::uint64_t value) {
        out += metric_family(name, help, "gauge", name + " " + std::to_string(value) + "\n");
    };
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0, resident = 0;
    if (statm >> pages >> resident)
        gauge("deskboxd_resident_bytes", "Resident memory of deskboxd.",
              resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)));
    struct mallinfo2 heap = ::mallinfo2();
    gauge("deskboxd_heap_in_use_bytes", "Heap bytes handed out (malloc's own count).",
          heap.uordblks + heap.hblkhd);
    gauge("deskboxd_heap_free_bytes", "Heap bytes free but kept by malloc.", heap.fordblks);
    std::error_code ec;
    std::uint64_t fds = 0, threads = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++fds;
    for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++threads;
    gauge("deskboxd_open_fds", "Open file descriptors of deskboxd.", fds);
    gauge("deskboxd_threads", "Threads of deskboxd.", threads);
    return out;
}

std::string ApiRouter::usage_metrics() const {
    std::string out;
    auto family = [&](const char* name, const char* help, const std::string& lines) {
        if (!lines.empty()) out += metric_family(name, help, "gauge", lines);
    };
    std::string pids, memory, disk;
    for (const auto& sandbox : manager_.list()) {
        auto u = sandbox->usage();
        // Ids are [A-Za-z0-9_.-]: nothing to escape in a label.
        const std::string id = "{sandbox=\"" + sandbox->id() + "\"} ";
        if (u.pids) pids += "deskbox_sandbox_pids" + id + std::to_string(*u.pids) + "\n";
        if (u.memory_bytes)
            memory += "deskbox_sandbox_memory_bytes" + id + std::to_string(*u.memory_bytes) + "\n";
        if (u.disk_bytes)
            disk += "deskbox_sandbox_disk_bytes" + id + std::to_string(*u.disk_bytes) + "\n";
    }
    family("deskbox_sandbox_pids", "Processes and threads of a sandbox (limits.pids).", pids);
    family("deskbox_sandbox_memory_bytes", "Memory a sandbox uses (limits.memory_mb).", memory);
    family("deskbox_sandbox_disk_bytes",
           "What a sandbox wrote to its writable layer (limits.disk_mb).", disk);
    return out;
}

HttpResponse ApiRouter::route(HttpRequest& request, const std::string& path,
                              const std::map<std::string, std::string>& query) {
    if (path == "/healthz") {
        require_method(request, {http::verb::get, http::verb::head});
        return json_response(200, {{"status", "ok"}, {"sandboxes", manager_.list().size()}});
    }
    if (path == "/metrics") {
        require_method(request, {http::verb::get});
        std::string text;
        text += "# HELP deskbox_sandboxes Sandboxes by state.\n# TYPE deskbox_sandboxes gauge\n";
        for (auto& [state, n] : manager_.count_by_state())
            text += "deskbox_sandboxes{state=\"" + state + "\"} " + std::to_string(n) + "\n";
        text += metrics_.create_seconds.render("deskbox_create_seconds", "Sandbox create latency.");
        text +=
            metrics_.screenshot_seconds.render("deskbox_screenshot_seconds", "Screenshot latency.");
        text += metrics_.action_seconds.render("deskbox_action_seconds", "Action request latency.");
        text +=
            metrics_.command_seconds.render("deskbox_command_seconds", "Command request latency.");
        text += metrics_.render_counters();
        auto counter = [&](const std::string& name, const char* help, const char* type,
                           auto value) {
            text += metric_family(name, help, type, name + " " + std::to_string(value) + "\n");
        };
        counter("deskbox_viewers", "Connected stream and VNC viewers.", "gauge",
                viewers_.connected.load());
        counter("deskbox_viewer_input_ignored_total", "Input sent with a view-only token.",
                "counter", viewers_.input_ignored.load());
        counter("deskbox_viewer_bad_messages_total", "Malformed viewer messages.", "counter",
                viewers_.bad_messages.load());
        counter("deskbox_viewer_packets_dropped_total", "Video packets skipped for slow viewers.",
                "counter", viewers_.packets_dropped.load());
        counter("deskbox_port_proxy_connections", "Open exposed-port connections.", "gauge",
                ports_.open.load());
        counter("deskbox_port_proxy_requests_total", "Exposed-port requests relayed.", "counter",
                ports_.total.load());
        text += egress_metrics();
        text += usage_metrics();
        text += process_metrics();
        HttpResponse res{http::status::ok, 11};
        res.set(http::field::content_type, "text/plain; version=0.0.4");
        res.body() = std::move(text);
        return res;
    }
    if (path == "/v1/sandboxes" || path == "/v1/sandboxes/") {
        if (request.method() == http::verb::post) {
            allow_only(query, {});
            ScopedTimer timer(metrics_.create_seconds);
            auto sandbox = manager_.create(parse_body(request, true));
            return json_response(201, sandbox->describe(true));
        }
        require_method(request, {http::verb::get});
        json list = json::array();
        for (auto& s : manager_.list()) list.push_back(s->describe(false));
        return json_response(200, {{"sandboxes", list}});
    }
    const std::string prefix = "/v1/sandboxes/";
    if (path.rfind(prefix, 0) == 0) {
        std::string rest = path.substr(prefix.size());
        auto slash = rest.find('/');
        std::string id = rest.substr(0, slash);
        return sandbox_route(request, id, slash == std::string::npos ? "" : rest.substr(slash + 1),
                             query);
    }
    if (path == "/v1/recordings" || path.rfind("/v1/recordings/", 0) == 0)
        return recordings_route(request, path == "/v1/recordings" ? "" : path.substr(15));
    if (path == "/v1/templates") {
        require_method(request, {http::verb::get});
        return json_response(200, {{"templates", manager_.template_names()}});
    }
    throw ApiError(404, "not_found", "no such endpoint: " + path);
}

HttpResponse ApiRouter::sandbox_route(HttpRequest& request, const std::string& id,
                                      const std::string& rest,
                                      const std::map<std::string, std::string>& query) {
    if (rest.empty()) {
        if (request.method() == http::verb::delete_) {
            manager_.kill(id);
            return json_response(200, {{"id", id}, {"state", "killed"}});
        }
        require_method(request, {http::verb::get});
        auto sandbox = manager_.find(id);
        auto described = sandbox->describe(true);
        described["ports"] = listening_ports(*sandbox);
        return json_response(200, described);
    }
    auto sandbox = manager_.find(id);
    if (rest == "timeout") {
        require_method(request, {http::verb::post});
        manager_.set_timeout(id, parse_body(request));
        return json_response(200, sandbox->describe(false));
    }
    if (rest == "pause" || rest == "resume") {
        require_method(request, {http::verb::post});
        json body = parse_body(request, true);
        bool snapshot = false;
        if (!body.is_null()) {
            if (!body.is_object()) throw bad_request("", "request body must be a JSON object");
            for (auto& [key, value] : body.items()) {
                if (rest != "pause" || key != "snapshot") throw bad_request(key, "unknown field");
                if (!value.is_boolean()) throw bad_request("snapshot", "expected true or false");
                snapshot = value;
            }
        }
        if (rest == "pause")
            sandbox->pause(snapshot);
        else
            sandbox->resume();
        sandbox->audit(rest, body);
        return json_response(200, sandbox->describe(false));
    }
    if (rest == "screenshot") {
        require_method(request, {http::verb::get});
        allow_only(query, {"format", "quality", "width", "height", "cursor", "compression"});
        streaming::EncodeOptions options;
        try {
            if (query.count("format"))
                options.format = streaming::parse_image_format(query.at("format"));
        } catch (const std::invalid_argument& e) {
            throw bad_request("format", "expected png, jpeg or webp");
        }
        if (query.count("quality")) options.quality = int_query(query, "quality");
        if (query.count("compression")) options.png_compression = int_query(query, "compression");
        if (query.count("width")) options.width = int_query(query, "width");
        if (query.count("height")) options.height = int_query(query, "height");
        options.composite_cursor = bool_query(query, "cursor");
        ScopedTimer timer(metrics_.screenshot_seconds);
        auto image = sandbox->screenshot(options);
        HttpResponse res{http::status::ok, 11};
        res.set(http::field::content_type, image.content_type);
        res.set("X-Screen-Width", std::to_string(sandbox->config().width));
        res.set("X-Screen-Height", std::to_string(sandbox->config().height));
        res.set(http::field::cache_control, "no-store");
        res.body().assign(image.bytes.begin(), image.bytes.end());
        return res;
    }
    if (rest == "actions") {
        require_method(request, {http::verb::post});
        allow_only(query, {"dialect", "screenshot"});
        input::Dialect dialect = input::Dialect::native;
        if (query.count("dialect")) {
            try {
                dialect = input::parse_dialect(query.at("dialect"));
            } catch (const input::ActionError& e) {
                throw bad_request("dialect", "expected native, anthropic or openai");
            }
        }
        ScopedTimer timer(metrics_.action_seconds);
        const bool with_screenshot = bool_query(query, "screenshot");
        return json_response(200, sandbox->actions(parse_body(request), dialect, with_screenshot));
    }
    if (rest == "wait" || rest == "locate" || rest == "ocr" || rest == "compare") {
        require_method(request, {http::verb::post});
        allow_only(query, {});
        json body = parse_body(request);
        if (rest == "wait") return json_response(200, sandbox->wait(body));
        if (rest == "locate") return json_response(200, sandbox->locate(body));
        if (rest == "ocr") return json_response(200, sandbox->ocr(body));
        return json_response(200, sandbox->compare(body));
    }
    if (rest == "commands") {
        require_method(request, {http::verb::post});
        json body = parse_body(request);
        if (!body.is_object()) throw bad_request("", "expected a JSON object");
        static const std::set<std::string> fields = {"cmd",       "argv",       "env",   "cwd",
                                                     "timeout_s", "background", "stdin", "stream"};
        for (auto& [k, v] : body.items())
            if (!fields.count(k)) throw bad_request(k, "unknown field");
        std::string stdin_bytes;
        if (body.contains("stdin")) {
            if (!body["stdin"].is_string()) throw bad_request("stdin", "expected a string");
            stdin_bytes = body["stdin"];
            body.erase("stdin");
        }
        double timeout_s = 60;
        if (body.contains("timeout_s") && !body["timeout_s"].is_null()) {
            if (!body["timeout_s"].is_number() || body["timeout_s"].get<double>() < 0)
                throw bad_request("timeout_s", "expected a number of seconds");
            timeout_s = body["timeout_s"];
        }
        sandbox->audit("command", body);
        ScopedTimer timer(metrics_.command_seconds);
        auto reply = sandbox->call("exec.run", body, stdin_bytes,
                                   std::chrono::milliseconds(static_cast<long long>(
                                       std::min(timeout_s, 86400.0) * 1000 + 15000)));
        return json_response(200, reply.result);
    }
    if (rest == "files") {
        allow_only(query, {"path", "recursive", "mode"});
        std::string path = required_query(query, "path");
        if (request.method() == http::verb::get) {
            auto stat = sandbox->call("files.stat", {{"path", path}}).result;
            if (stat.value("type", "") == "dir")
                return json_response(200, sandbox->call("files.list", {{"path", path}}).result);
            auto reply = sandbox->call("files.read", {{"path", path}}, {}, std::chrono::minutes(5));
            HttpResponse res{http::status::ok, 11};
            res.set(http::field::content_type, "application/octet-stream");
            res.body() = std::move(reply.body);
            return res;
        }
        if (request.method() == http::verb::put) {
            json params = {{"path", path}, {"parents", true}};
            if (query.count("mode")) params["mode"] = query.at("mode");
            sandbox->audit("files.write", {{"path", path}, {"bytes", request.body().size()}});
            auto reply = sandbox->call("files.write", params, std::move(request.body()),
                                       std::chrono::minutes(5));
            return json_response(200, reply.result);
        }
        if (request.method() == http::verb::delete_) {
            bool recursive = bool_query(query, "recursive");
            sandbox->audit("files.remove", {{"path", path}, {"recursive", recursive}});
            return json_response(
                200,
                sandbox->call("files.remove", {{"path", path}, {"recursive", recursive}}).result);
        }
        require_method(request, {http::verb::get, http::verb::put, http::verb::delete_});
    }
    if (rest == "recording") {
        allow_only(query, {});
        if (request.method() == http::verb::post)
            return json_response(201, sandbox->start_recording(parse_body(request, true)));
        if (request.method() == http::verb::delete_)
            return json_response(200, sandbox->stop_recording());
        require_method(request, {http::verb::get});
        return json_response(200, sandbox->recording_status());
    }
    if (rest == "ports" || rest == "ports/") {
        require_method(request, {http::verb::get});
        auto ports = listening_ports(*sandbox);
        if (ports.is_null())
            throw ApiError(409, "conflict", "the sandbox's agent cannot list its ports now");
        return json_response(200, {{"ports", ports}});
    }
    if (rest == "processes/kill") {
        require_method(request, {http::verb::post});
        allow_only(query, {});
        json body = parse_body(request, true);
        if (!body.is_null() && !(body.is_object() && body.empty()))
            throw bad_request("", "takes no fields: it ends every process but the desktop");
        return json_response(200, sandbox->kill_processes());
    }
    if (rest == "windows") {
        require_method(request, {http::verb::get});
        allow_only(query, {});
        return json_response(200, sandbox->call("windows.list").result);
    }
    if (rest == "cursor") {
        require_method(request, {http::verb::get});
        allow_only(query, {});
        auto result = sandbox->call("cursor.get").result;
        return json_response(200, result);
    }
    if (rest == "clipboard") {
        allow_only(query, {});
        if (request.method() == http::verb::put || request.method() == http::verb::post) {
            json body = parse_body(request);
            if (!body.is_object() || !body.contains("text") || !body["text"].is_string())
                throw bad_request("text", "expected a string");
            for (auto& [k, v] : body.items())
                if (k != "text") throw bad_request(k, "unknown field");
            return json_response(200, sandbox->call("clipboard.set", body).result);
        }
        require_method(request, {http::verb::get});
        return json_response(200, sandbox->call("clipboard.get").result);
    }
    throw ApiError(404, "not_found", "no such endpoint: /v1/sandboxes/" + id + "/" + rest);
}

// Finished and running recordings: <id>.mp4 (fragmented, so a running one plays up to its
// last fragment) and <id>.events.jsonl. They outlive their sandboxes until deleted.
HttpResponse ApiRouter::recordings_route(HttpRequest& request, const std::string& rest) {
    namespace fs = std::filesystem;
    const fs::path dir = manager_.recordings_dir();
    if (rest.empty()) {
        require_method(request, {http::verb::get});
        json list = json::array();
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            std::string name = entry.path().filename().string();
            if (entry.path().extension() != ".mp4") continue;
            std::string id = name.substr(0, name.size() - 4);
            list.push_back({{"id", id},
                            {"bytes", entry.file_size(ec)},
                            {"events", fs::exists(dir / (id + ".events.jsonl"))}});
        }
        return json_response(200, {{"recordings", list}});
    }
    auto slash = rest.find('/');
    std::string id = rest.substr(0, slash);
    std::string what = slash == std::string::npos ? "" : rest.substr(slash + 1);
    try {
        runtime::validate_id(id);
    } catch (const runtime::SpecError&) {
        throw ApiError(404, "not_found", "no recording '" + id.substr(0, 64) + "'", "id");
    }
    fs::path video = dir / (id + ".mp4"), events = dir / (id + ".events.jsonl");
    if (!fs::exists(video)) throw ApiError(404, "not_found", "no recording '" + id + "'", "id");
    if (what.empty() && request.method() == http::verb::delete_) {
        for (const auto& s : manager_.list())
            if (s->describe(false).value("recording", "") == id)
                throw ApiError(409, "conflict", "recording " + id + " is running; stop it first");
        fs::remove(video);
        fs::remove(events);
        return json_response(200, {{"id", id}, {"deleted", true}});
    }
    require_method(request, {http::verb::get, http::verb::head});
    if (what != "" && what != "events")
        throw ApiError(404, "not_found", "no such endpoint: " + rest);
    const fs::path& file = what.empty() ? video : events;
    std::ifstream in(file, std::ios::binary);
    if (!in)
        throw ApiError(404, "not_found",
                       "recording " + id + " has no " + (what.empty() ? "video" : "events track"));
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, what.empty() ? "video/mp4" : "application/x-ndjson");
    res.set(http::field::content_disposition,
            "attachment; filename=\"" + file.filename().string() + "\"");
    res.body().assign(std::istreambuf_iterator<char>(in), {});
    return res;
}

}  // namespace deskbox::server
