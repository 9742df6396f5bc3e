#include "server/sandbox/create_request.hpp"

#include <set>
#include <tuple>

#include "server/sandbox/recording_request.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

const std::set<std::string> kCreateFields = {
    "template", "runtime",        "resolution", "dpi",     "timeout_s",  "metadata",
    "env",      "api_resolution", "on_timeout", "limits",  "network",    "record",
    "vnc",      "fast_start",     "ready",      "volumes", "auto_resume"};

// At most this many volumes in one sandbox.
constexpr std::size_t kMaxVolumes = 16;

std::pair<int, int> parse_size(const json& v, const std::string& field) {
    if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer())
        throw invalid_field(field, "expected [width, height] as two integers");
    int w = v[0], h = v[1];
    if (w < 64 || h < 64 || w > 8192 || h > 8192)
        throw invalid_field(field, "each side must be in 64..8192");
    return {w, h};
}

// The template's session settings: what the request's own fields then override.
void apply_template_session(const json& definition, SandboxConfig& c) {
    if (auto workdir = definition.find("workdir");
        workdir != definition.end() && workdir->is_string())
        c.workdir = workdir->get<std::string>();
    if (!definition.contains("session")) return;
    const auto& s = definition["session"];
    if (s.contains("resolution"))
        std::tie(c.width, c.height) = parse_size(s["resolution"], "template.session.resolution");
    c.dpi = s.value("dpi", c.dpi);
}

void read_screen(const json& request, SandboxConfig& c) {
    if (request.contains("resolution"))
        std::tie(c.width, c.height) = parse_size(request["resolution"], "resolution");
    if (request.contains("api_resolution")) {
        auto [w, h] = parse_size(request["api_resolution"], "api_resolution");
        c.api_resolution = input::Size{w, h};
    }
    if (request.contains("dpi")) {
        if (!request["dpi"].is_number_integer()) throw invalid_field("dpi", "expected an integer");
        c.dpi = request["dpi"];
        if (c.dpi < 24 || c.dpi > 600) throw invalid_field("dpi", "must be in 24..600");
    }
}

void read_lifetime(const json& request, const CreateDefaults& defaults, SandboxConfig& c) {
    if (request.contains("timeout_s")) {
        const auto& t = request["timeout_s"];
        if (!t.is_number_integer())
            throw invalid_field("timeout_s", "expected an integer number of seconds");
        long long s = t;
        if (s < 1 || s > defaults.max_timeout.count())
            throw invalid_field("timeout_s",
                                "must be in 1.." + std::to_string(defaults.max_timeout.count()));
        c.timeout = std::chrono::seconds(s);
    }
    if (request.contains("on_timeout")) {
        const auto& v = request["on_timeout"];
        if (v != "kill" && v != "pause")
            throw invalid_field("on_timeout", "expected \"kill\" or \"pause\"");
        c.pause_on_timeout = v == "pause";
    }
    if (request.contains("auto_resume")) {
        if (!request["auto_resume"].is_boolean())
            throw invalid_field("auto_resume", "expected a boolean");
        c.auto_resume = request["auto_resume"];
        if (c.auto_resume && request.contains("on_timeout") && !c.pause_on_timeout)
            throw invalid_field(
                "auto_resume",
                "resumes a sandbox its timeout paused: on_timeout must be \"pause\"");
        if (c.auto_resume) c.pause_on_timeout = true;
    }
}

void read_metadata_and_env(const json& request, SandboxConfig& c) {
    if (request.contains("metadata")) {
        if (!request["metadata"].is_object()) throw invalid_field("metadata", "expected an object");
        if (request["metadata"].dump().size() > 16384)
            throw invalid_field("metadata", "larger than 16 KiB");
        c.metadata = request["metadata"];
    }
    if (request.contains("env")) {
        if (!request["env"].is_object())
            throw invalid_field("env", "expected an object of strings");
        for (auto& [k, v] : request["env"].items()) {
            if (!v.is_string()) throw invalid_field("env." + k, "expected a string");
            if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos)
                throw invalid_field("env", "invalid variable name '" + k + "'");
            c.env[k] = v;
        }
    }
}

// vnc, record (only checked here: the server starts the recording) and fast_start.
void read_switches(const json& request, SandboxConfig& c) {
    if (request.contains("vnc")) {
        if (!request["vnc"].is_boolean()) throw invalid_field("vnc", "expected a boolean");
        c.vnc = request["vnc"];
    }
    if (request.contains("record")) {
        const auto& r = request["record"];
        if (!r.is_boolean() && !r.is_object())
            throw invalid_field("record", "expected true or {\"actions\": bool, \"fps\": n}");
        if (r.is_object()) read_recording_request(r, "record");
    }
    if (request.contains("fast_start")) {
        if (!request["fast_start"].is_boolean())
            throw invalid_field("fast_start", "expected a boolean");
        c.fast_start = request["fast_start"];
    }
}

std::size_t autostart_entries(const json& definition) {
    auto session = definition.find("session");
    if (session == definition.end() || !session->is_object()) return 0;
    auto autostart = session->find("autostart");
    return autostart != session->end() && autostart->is_array() ? autostart->size() : 0;
}

// `ready`: false (answer after the first frame), true (the template's) or a condition of its
// own in place of the template's.
void read_ready(const json& request, const json& definition, SandboxConfig& c) {
    if (!request.contains("ready")) return;
    const auto& r = request["ready"];
    if (r.is_boolean()) {
        c.ready.wait = r.get<bool>();
    } else if (r.is_object()) {
        c.ready = parse_ready_condition(r, "ready", autostart_entries(definition));
    } else {
        throw invalid_field("ready",
                            "expected false, true or an object {windows, window_title, "
                            "port, command, timeout_s, settle_ms}");
    }
}

void read_limits(const json& l, SandboxConfig& c) {
    RequestReader limits(l, "limits");
    if (auto v = limits.integer("memory_mb", 128, 65536)) c.limits.memory_mb = *v;
    if (auto v = limits.number("cpus", 0.1, 64)) c.limits.cpus = *v;
    if (auto v = limits.integer("egress_kbps", 8, 100'000'000)) c.egress_kbps = *v;  // kbit/s
    if (auto v = limits.integer("pids", 32, 65536)) c.limits.pids = static_cast<std::uint32_t>(*v);
    if (auto v = limits.integer("disk_mb", 64, 1ll << 22)) c.limits.disk_mb = *v;  // MiB
    limits.finish();
}

// [{"name", "path", "read_only"?}, ...]: which volumes to mount where (server/volumes/).
void read_volumes(const json& request, SandboxConfig& c) {
    const auto& list = request["volumes"];
    if (!list.is_array()) throw invalid_field("volumes", "expected an array of {name, path}");
    if (list.size() > kMaxVolumes)
        throw invalid_field("volumes", "at most " + std::to_string(kMaxVolumes) + " volumes");
    for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string field = "volumes[" + std::to_string(i) + "]";
        RequestReader entry(list[i], field);
        VolumeRequest volume;
        volume.name = entry.required_string("name", 63);
        volume.path = entry.required_string("path", 256);
        volume.read_only = entry.boolean("read_only").value_or(false);
        entry.finish();
        if (auto problem = runtime::volume_path_problem(volume.path); !problem.empty())
            throw invalid_field(field + ".path", problem);
        for (const auto& earlier : c.volumes)
            if (earlier.path == volume.path)
                throw invalid_field(field + ".path", volume.path + " is mounted twice");
        c.volumes.push_back(std::move(volume));
    }
}

}  // namespace

nlohmann::json volumes_to_json(const std::vector<VolumeRequest>& volumes) {
    json out = json::array();
    for (const auto& v : volumes)
        out.push_back({{"name", v.name}, {"path", v.path}, {"read_only", v.read_only}});
    return out;
}

ReadyCondition template_ready_condition(const json& definition) {
    const std::size_t autostart = autostart_entries(definition);
    auto ready = definition.find("ready");
    if (ready == definition.end()) return default_ready_condition(autostart);
    try {
        return parse_ready_condition(*ready, "template.ready", autostart);
    } catch (const SandboxError& e) {
        throw SandboxError(SandboxFault::failed, "template_error",
                           std::string("the template's definition: ") + e.what(), e.field());
    }
}

CreateRequest parse_create_request(const json& request, const CreateDefaults& defaults,
                                   const TemplateDefinitionLookup& template_definition) {
    {
        // The read_* functions below read these fields; anything else is refused first.
        RequestReader fields(request);
        for (const auto& name : kCreateFields) fields.raw(name);
        fields.finish();
    }
    CreateRequest out;
    SandboxConfig& c = out.config;
    c.template_name = defaults.template_name;
    c.runtime_name = defaults.runtime_name;
    c.timeout = defaults.timeout;
    c.limits.disk_mb = defaults.disk_mb;
    auto string_field = [&](const char* name, std::string& field) {
        if (!request.contains(name)) return;
        if (!request[name].is_string()) throw invalid_field(name, "expected a string");
        field = request[name];
    };
    string_field("template", c.template_name);
    string_field("runtime", c.runtime_name);
    out.definition = template_definition(c.template_name);
    apply_template_session(out.definition, c);
    c.ready = template_ready_condition(out.definition);
    read_ready(request, out.definition, c);
    read_screen(request, c);
    read_lifetime(request, defaults, c);
    read_metadata_and_env(request, c);
    read_switches(request, c);
    c.network = defaults.network;
    if (request.contains("network")) {
        try {
            c.network = network::NetworkPolicy::parse(request["network"]);
        } catch (const network::PolicyError& e) {
            throw invalid_field(e.field(), std::string(e.what()).substr(e.field().size() + 2));
        }
    }
    if (request.contains("limits")) read_limits(request["limits"], c);
    if (request.contains("volumes")) read_volumes(request, c);
    return out;
}

}  // namespace deskbox::server
