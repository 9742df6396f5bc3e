#include "server/api/api_router.hpp"

#include <climits>
#include <set>

#include "common/parse_integer.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

HttpResponse json_response(unsigned status, const json& body) {
    HttpResponse res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
    res.prepare_payload();
    return res;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string url_decode(std::string_view in, bool plus_is_space) {
    std::string out;
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '%' && i + 2 < in.size() && hex_value(in[i + 1]) >= 0 &&
            hex_value(in[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(in[i + 1]) * 16 + hex_value(in[i + 2]));
            i += 2;
        } else if (in[i] == '%') {
            throw bad_request("", "malformed percent-encoding in the URL");
        } else if (plus_is_space && in[i] == '+') {
            out += ' ';
        } else {
            out += in[i];
        }
    }
    return out;
}

std::map<std::string, std::string> parse_query(std::string_view q) {
    std::map<std::string, std::string> out;
    while (!q.empty()) {
        auto amp = q.find('&');
        auto part = q.substr(0, amp);
        q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
        if (part.empty()) continue;
        auto eq = part.find('=');
        std::string key = url_decode(part.substr(0, eq), true);
        std::string value = eq == std::string_view::npos ? "" : url_decode(part.substr(eq + 1), true);
        out[key] = value;
    }
    return out;
}

json parse_body(const HttpRequest& request, bool allow_empty = false) {
    if (request.body().empty()) {
        if (allow_empty) return json::object();
        throw bad_request("", "request body must be JSON");
    }
    try {
        return json::parse(request.body());
    } catch (const json::parse_error& e) {
        throw ApiError(400, "malformed_json", std::string("request body is not valid JSON: ") + e.what());
    }
}

void allow_only(const std::map<std::string, std::string>& query, std::set<std::string> allowed) {
    for (auto& [k, v] : query)
        if (!allowed.count(k)) throw bad_request(k, "unknown query parameter");
}

int int_query(const std::map<std::string, std::string>& query, const std::string& name) {
    const std::string& v = query.at(name);
    auto value = parse_integer(v);
    if (!value || *value < INT_MIN || *value > INT_MAX)
        throw bad_request(name, "expected an integer, got '" + v + "'");
    return static_cast<int>(*value);
}

std::string required_query(const std::map<std::string, std::string>& query, const std::string& name) {
    auto it = query.find(name);
    if (it == query.end() || it->second.empty()) throw bad_request(name, "required");
    return it->second;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

void require_method(const HttpRequest& r, std::initializer_list<http::verb> verbs) {
    for (auto v : verbs)
        if (r.method() == v) return;
    throw ApiError(405, "method_not_allowed",
                   std::string(r.method_string()) + " is not allowed on " + std::string(r.target()));
}

}  // namespace

ApiRouter::ApiRouter(SandboxManager& manager, ApiOptions options)
    : manager_(manager), options_(std::move(options)) {}

bool ApiRouter::authorised(const HttpRequest& request) const {
    if (options_.api_keys.empty()) return true;
    std::string given;
    if (auto it = request.find(http::field::authorization); it != request.end()) {
        std::string value(it->value());
        if (value.rfind("Bearer ", 0) == 0) given = value.substr(7);
    }
    if (given.empty()) {
        if (auto it = request.find("X-API-Key"); it != request.end()) given = std::string(it->value());
    }
    bool ok = false;
    for (const auto& key : options_.api_keys) ok |= constant_time_equal(given, key);
    return ok;
}

HttpResponse ApiRouter::handle(HttpExchange& exchange) {
    HttpRequest& request = exchange.request;
    metrics_.count_request();
    try {
        std::string target(request.target());
        auto qmark = target.find('?');
        std::string path = url_decode(target.substr(0, qmark), false);
        auto query = qmark == std::string::npos ? std::map<std::string, std::string>{}
                                                : parse_query(std::string_view(target).substr(qmark + 1));
        if (path != "/healthz" && !authorised(request))
            throw ApiError(401, "unauthorized", "missing or wrong API key (Authorization: Bearer KEY)");
        return route(request, path, query);
    } catch (const ApiError& e) {
        metrics_.count_error(e.code());
        return json_error(e.status(), e.code(), e.what(), e.field());
    } catch (const std::exception& e) {
        metrics_.count_error("internal");
        return json_error(500, "internal", e.what());
    }
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
        text += metrics_.screenshot_seconds.render("deskbox_screenshot_seconds", "Screenshot latency.");
        text += metrics_.action_seconds.render("deskbox_action_seconds", "Action request latency.");
        text += metrics_.command_seconds.render("deskbox_command_seconds", "Command request latency.");
        text += metrics_.render_counters();
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
        return sandbox_route(request, id, slash == std::string::npos ? "" : rest.substr(slash + 1), query);
    }
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
        return json_response(200, manager_.find(id)->describe(true));
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
        if (body.contains("snapshot") && body["snapshot"] == true)
            throw ApiError(400, "unsupported", "snapshots need the microvm runtime", "snapshot");
        if (rest == "pause") sandbox->pause();
        else sandbox->resume();
        sandbox->audit(rest, body);
        return json_response(200, sandbox->describe(false));
    }
    if (rest == "screenshot") {
        require_method(request, {http::verb::get});
        allow_only(query, {"format", "quality", "width", "height", "cursor", "compression"});
        streaming::EncodeOptions options;
        try {
            if (query.count("format")) options.format = streaming::parse_image_format(query.at("format"));
        } catch (const std::invalid_argument& e) {
            throw bad_request("format", "expected png, jpeg or webp");
        }
        if (query.count("quality")) options.quality = int_query(query, "quality");
        if (query.count("compression")) options.png_compression = int_query(query, "compression");
        if (query.count("width")) options.width = int_query(query, "width");
        if (query.count("height")) options.height = int_query(query, "height");
        if (query.count("cursor")) options.composite_cursor = query.at("cursor") == "true" || query.at("cursor") == "1";
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
        allow_only(query, {"dialect"});
        input::Dialect dialect = input::Dialect::native;
        if (query.count("dialect")) {
            try {
                dialect = input::parse_dialect(query.at("dialect"));
            } catch (const input::ActionError& e) {
                throw bad_request("dialect", "expected native, anthropic or openai");
            }
        }
        ScopedTimer timer(metrics_.action_seconds);
        return json_response(200, sandbox->actions(parse_body(request), dialect));
    }
    if (rest == "commands") {
        require_method(request, {http::verb::post});
        json body = parse_body(request);
        if (!body.is_object()) throw bad_request("", "expected a JSON object");
        static const std::set<std::string> fields = {"cmd", "argv", "env", "cwd", "timeout_s",
                                                     "background", "stdin", "stream"};
        for (auto& [k, v] : body.items())
            if (!fields.count(k)) throw bad_request(k, "unknown field");
        std::string stdin_bytes;
        if (body.contains("stdin")) {
            if (!body["stdin"].is_string()) throw bad_request("stdin", "expected a string");
            stdin_bytes = body["stdin"];
            body.erase("stdin");
        }
        double timeout_s = 60;
        if (body.contains("timeout_s") && body["timeout_s"].is_number()) timeout_s = body["timeout_s"];
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
            bool recursive = query.count("recursive") && query.at("recursive") == "true";
            sandbox->audit("files.remove", {{"path", path}, {"recursive", recursive}});
            return json_response(200, sandbox->call("files.remove", {{"path", path}, {"recursive", recursive}}).result);
        }
        require_method(request, {http::verb::get, http::verb::put, http::verb::delete_});
    }
    if (rest == "windows") {
        require_method(request, {http::verb::get});
        return json_response(200, sandbox->call("windows.list").result);
    }
    if (rest == "cursor") {
        require_method(request, {http::verb::get});
        auto result = sandbox->call("cursor.get").result;
        return json_response(200, result);
    }
    if (rest == "clipboard") {
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

}  // namespace deskbox::server
