#include "server/api/routes/templates.hpp"

#include "server/api/http_util.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/templates/template_ref.hpp"

namespace deskbox::server::routes {

using nlohmann::json;
using templates::BuildKind;
using templates::BuildRequest;
using templates::TemplateError;
using templates::TemplateRef;

namespace {

// Path segments under /v1/templates/ that are routes, not template names.
bool reserved_name(const std::string& name) {
    return name == "builds" || name == "uploads" || name == "imports";
}

// The domain's errors become HTTP here, and only here.
template <typename F>
auto answer(F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const TemplateError& e) {
        using Code = TemplateError::Code;
        switch (e.code()) {
            case Code::invalid:
                throw ApiError(400, "bad_request", e.what(), e.field());
            case Code::not_found:
                throw ApiError(404, "not_found", e.what(), e.field());
            case Code::conflict:
                throw ApiError(409, "conflict", e.what(), e.field());
            case Code::too_large:
                throw ApiError(413, "too_large", e.what(), e.field());
            case Code::unavailable:
                throw ApiError(503, "builder_unavailable", e.what(), e.field());
        }
        throw;
    }
}

TemplateRef read_ref(RequestReader& body) {
    TemplateRef ref;
    ref.name = body.required_string("name", 63);
    if (auto problem = templates::name_problem(ref.name)) throw bad_request("name", *problem);
    if (reserved_name(ref.name)) throw bad_request("name", "'" + ref.name + "' is reserved");
    if (auto tag = body.string("tag", 128)) {
        if (auto problem = templates::tag_problem(*tag)) throw bad_request("tag", *problem);
        ref.tag = *tag;
    }
    return ref;
}

TemplateRef ref_in_path(const RouteContext& context) {
    try {
        return templates::parse_ref(context.params.at("name"));
    } catch (const std::invalid_argument& e) {
        throw ApiError(404, "not_found", e.what(), "name");
    }
}

// What a sandbox started from it will wait for and run: start_cmd, ready_cmd and ready.
void read_start_and_ready(RequestReader& body, BuildRequest& request) {
    if (auto start = body.command("start_cmd")) request.start_command = *start;
    json ready = json();
    if (auto object = body.object("ready")) {
        ready = json::object();
        if (auto windows = object->raw("windows")) {
            if (!(windows->is_string() && *windows == "autostart") &&
                !(windows->is_number_integer() && *windows >= 0 && *windows <= 64))
                throw bad_request("ready.windows", "expected \"autostart\" or an integer 0..64");
            ready["windows"] = *windows;
        }
        if (auto title = object->string("window_title", 256)) ready["window_title"] = *title;
        if (auto port = object->integer("port", 1, 65535)) ready["port"] = *port;
        if (auto command = object->command("command")) ready["command"] = *command;
        if (auto timeout = object->integer("timeout_s", 1, 600)) ready["timeout_s"] = *timeout;
        if (auto settle = object->integer("settle_ms", 0, 5000)) ready["settle_ms"] = *settle;
        object->finish();
    }
    if (auto command = body.command("ready_cmd")) {
        if (ready.is_null()) ready = json::object();
        ready["command"] = *command;
    }
    if (auto timeout = body.integer("ready_timeout_s", 1, 600)) {
        if (ready.is_null()) ready = json::object();
        ready["timeout_s"] = *timeout;
    }
    request.ready = ready;
}

void read_limits_and_network(RequestReader& body, BuildRequest& request,
                             const network::NetworkPolicy& fallback) {
    request.network = fallback;
    if (auto policy = body.raw("network")) {
        try {
            request.network = network::NetworkPolicy::parse(*policy);
        } catch (const network::PolicyError& e) {
            throw ApiError(400, "bad_request", e.what(), "network");
        }
        // Secrets stay out of images: a build's steps get no credentials.
        if (!request.network.rules().empty())
            throw ApiError(400, "bad_request", "a build's network takes no credential rules",
                           "network.rules");
    }
    if (auto timeout = body.integer("timeout_s", 10, 86400))
        request.timeout = std::chrono::seconds(*timeout);
    if (auto limits = body.object("limits")) {
        if (auto memory = limits->integer("memory_mb", 256, 65536))
            request.limits.memory_mb = static_cast<std::uint64_t>(*memory);
        if (auto cpus = limits->number("cpus", 0.1, 64)) request.limits.cpus = *cpus;
        if (auto pids = limits->integer("pids", 64, 65536))
            request.limits.pids = static_cast<std::uint64_t>(*pids);
        if (auto disk = limits->integer("disk_mb", 64, 1 << 22))
            request.limits.disk_mb = static_cast<std::uint64_t>(*disk);
        limits->finish();
    }
}

// Queues a parsed build or import: 202 with where to follow it.
HttpResponse queue(RouteContext& context, BuildRequest request) {
    auto info = answer([&] { return context.api.manager.templates().start(std::move(request)); });
    auto res = json_response(202, info.to_json());
    res.set(http::field::location, "/v1/templates/builds/" + info.id);
    return res;
}

json describe(SandboxManager& manager, const templates::StoredTemplate& t,
              const std::map<std::string, SandboxManager::TemplateOffer>& offers) {
    json j = {{"template", t.ref.str()},
              {"name", t.ref.name},
              {"tag", t.ref.tag},
              {"kind", "user"},
              {"image_id", t.image_id},
              {"base", t.base},
              {"base_digest", t.base_digest},
              {"pulled", t.pulled},
              {"layers", t.layers},
              {"bytes", t.bytes},
              {"build_seconds", t.build_seconds},
              {"created_at", t.created_at},
              {"build_id", t.build_id},
              {"in_use", manager.template_in_use(t.ref)}};
    const auto& session = t.definition.value("session", json::object());
    j["start"] = session.value("autostart", json::array());
    if (t.definition.contains("ready")) j["ready"] = t.definition["ready"];
    auto offer = offers.find(t.ref.str());
    j["runtimes"] = offer == offers.end() ? json::array() : json(offer->second.runtimes);
    return j;
}

}  // namespace

HttpResponse list_templates(RouteContext& context) {
    allow_only(context.query, {});
    auto& manager = context.api.manager;
    const auto offers = manager.template_offers();
    json items = json::array();
    for (const auto& name : manager.template_names()) {
        if (name.find(':') != std::string::npos) continue;
        auto offer = offers.find(name);
        items.push_back(
            {{"template", name},
             {"name", name},
             {"kind", "shipped"},
             {"runtimes", offer == offers.end() ? json::array() : json(offer->second.runtimes)}});
    }
    for (const auto& t : manager.templates().templates())
        items.push_back(describe(manager, t, offers));
    return json_response(200, {{"templates", manager.template_names()}, {"items", items}});
}

HttpResponse get_template(RouteContext& context) {
    allow_only(context.query, {});
    auto& manager = context.api.manager;
    auto ref = ref_in_path(context);
    auto found = manager.templates().find(ref);
    if (!found) throw ApiError(404, "not_found", "no template '" + ref.str() + "'", "name");
    return json_response(200, describe(manager, *found, manager.template_offers()));
}

HttpResponse delete_template(RouteContext& context) {
    allow_only(context.query, {});
    auto ref = ref_in_path(context);
    answer([&] {
        context.api.manager.templates().remove(ref);
        return 0;
    });
    return json_response(200, {{"deleted", ref.str()}});
}

HttpResponse create_upload(RouteContext& context) {
    allow_only(context.query, {});
    auto info = answer(
        [&] { return context.api.manager.templates().create_upload(context.request().body()); });
    return json_response(201, {{"upload_id", info.id}, {"bytes", info.bytes}});
}

HttpResponse append_upload(RouteContext& context) {
    allow_only(context.query, {"offset"});
    auto offset = required_query(context.query, "offset");
    if (offset.empty() || offset.size() > 19 ||
        offset.find_first_not_of("0123456789") != std::string::npos)
        throw bad_request("offset", "expected a byte count");
    auto info = answer([&] {
        return context.api.manager.templates().append_upload(
            context.params.at("id"), std::stoull(offset), context.request().body());
    });
    return json_response(200, {{"upload_id", info.id}, {"bytes", info.bytes}});
}

HttpResponse start_build(RouteContext& context) {
    allow_only(context.query, {});
    auto body_json = parse_body(context.request());
    RequestReader body(body_json);
    BuildRequest request;
    request.kind = BuildKind::dockerfile;
    request.ref = read_ref(body);
    if (auto upload = body.string("upload_id", 64)) request.upload_id = *upload;
    if (auto text = body.string("dockerfile", 1 << 20)) request.dockerfile = *text;
    if (auto path = body.string("dockerfile_path", 1024)) {
        if (!request.dockerfile.empty())
            throw bad_request("dockerfile_path", "give dockerfile or dockerfile_path, not both");
        request.dockerfile_path = *path;
    }
    if (request.dockerfile.empty() && request.upload_id.empty())
        throw bad_request("dockerfile",
                          "required: the Dockerfile's text, or an upload_id of a build context "
                          "that holds one");
    if (auto args = body.string_map("build_args", 256)) request.build_args = *args;
    if (auto no_cache = body.boolean("no_cache")) request.no_cache = *no_cache;
    read_start_and_ready(body, request);
    read_limits_and_network(body, request, context.api.manager.options().default_network);
    body.finish();
    return queue(context, std::move(request));
}

HttpResponse start_import(RouteContext& context) {
    allow_only(context.query, {});
    auto body_json = parse_body(context.request());
    RequestReader body(body_json);
    BuildRequest request;
    request.kind = BuildKind::import;
    request.ref = read_ref(body);
    // An uploaded archive, or an image in a registry deskboxd's operator allows.
    if (auto upload = body.string("upload_id", 64)) request.upload_id = *upload;
    if (auto image = body.string("image", 512)) request.image = *image;
    if (request.upload_id.empty() == request.image.empty())
        throw bad_request(request.upload_id.empty() ? "upload_id" : "image",
                          "give upload_id (an uploaded image archive) or image (a registry's "
                          "image, HOST[:PORT]/REPOSITORY[:TAG|@sha256:DIGEST]), one of them");
    if (auto format = body.string("format", 32)) {
        if (!request.image.empty())
            throw bad_request("format", "format is for an uploaded archive, not an image");
        if (*format != "oci-archive" && *format != "docker-archive")
            throw bad_request("format", "expected \"oci-archive\" or \"docker-archive\"");
        request.archive_format = *format;
    }
    read_start_and_ready(body, request);
    if (auto timeout = body.integer("timeout_s", 10, 86400))
        request.timeout = std::chrono::seconds(*timeout);
    request.network = network::NetworkPolicy::parse({{"allow", json::array()}});
    body.finish();
    return queue(context, std::move(request));
}

HttpResponse list_builds(RouteContext& context) {
    allow_only(context.query, {});
    json builds = json::array();
    for (const auto& b : context.api.manager.templates().builds()) builds.push_back(b.to_json());
    return json_response(200, {{"builds", builds}});
}

HttpResponse get_build(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200,
                         answer([&] {
                             return context.api.manager.templates().build(context.params.at("id"));
                         }).to_json());
}

HttpResponse build_log(RouteContext& context) {
    allow_only(context.query, {"offset", "wait_s", "max_bytes"});
    auto number = [&](const std::string& name, long long fallback, long long max) {
        if (!context.query.count(name)) return fallback;
        long long v = int_query(context.query, name);
        if (v < 0 || v > max)
            throw bad_request(name, "expected an integer in 0.." + std::to_string(max));
        return v;
    };
    const auto offset = context.query.count("offset")
                            ? [&] {
                                  const auto& s = context.query.at("offset");
                                  if (s.empty() || s.size() > 19 ||
                                      s.find_first_not_of("0123456789") != std::string::npos)
                                      throw bad_request("offset", "expected a byte count");
                                  return std::stoull(s);
                              }()
                            : 0ull;
    const auto wait = number("wait_s", 0, 30);
    const auto max_bytes = number("max_bytes", 1 << 20, 16 << 20);
    auto chunk = answer([&] {
        return context.api.manager.templates().log(context.params.at("id"), offset,
                                                   static_cast<std::size_t>(max_bytes),
                                                   std::chrono::seconds(wait));
    });
    return json_response(200, {{"offset", chunk.offset},
                               {"next_offset", chunk.next_offset},
                               {"text", chunk.text},
                               {"complete", chunk.complete},
                               {"status", templates::to_string(chunk.state)}});
}

HttpResponse cancel_build(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200,
                         answer([&] {
                             return context.api.manager.templates().cancel(context.params.at("id"));
                         }).to_json());
}

}  // namespace deskbox::server::routes
