#include "server/templates/deskbox_layer.hpp"

#include <sstream>

namespace deskbox::templates {

using nlohmann::json;

std::string contract_script() {
    // POSIX sh and the tools even busybox has: it must run on any base.
    return R"SH(#!/bin/sh
# deskbox's last layer: make this image meet the runtime contract, or say what it lacks.
refuse() { echo "deskbox-contract: $*"; exit 73; }
have_lib() {
    for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /lib64 /usr/lib /lib; do
        [ -e "$d/$1" ] && return 0
    done
    return 1
}
missing=""
[ -x /usr/bin/Xvfb ] || command -v Xvfb >/dev/null 2>&1 || missing="$missing Xvfb (Debian package xvfb)"
for pair in libX11.so.6:libx11-6 libXext.so.6:libxext6 libXtst.so.6:libxtst6 \
            libXdamage.so.1:libxdamage1 libXfixes.so.3:libxfixes3 \
            libxkbcommon.so.0:libxkbcommon0 libstdc++.so.6:libstdc++6; do
    have_lib "${pair%%:*}" || missing="$missing ${pair%%:*} (package ${pair#*:})"
done
if [ -n "$missing" ]; then
    refuse "missing:$missing. Build FROM deskbox/minimal, or add: RUN apt-get update && apt-get install -y --no-install-recommends xvfb libx11-6 libxext6 libxtst6 libxdamage1 libxfixes3 libxkbcommon0 libstdc++6"
fi
if ! grep -q '^user:' /etc/passwd; then
    other=$(grep '^[^:]*:[^:]*:1000:' /etc/passwd | cut -d: -f1)
    [ -z "$other" ] || refuse "uid 1000 belongs to '$other', but the desktop runs as 'user' with uid 1000: add RUN usermod -l user -d /home/user -m $other (or free uid 1000)"
    shell=/bin/sh
    [ -x /bin/bash ] && shell=/bin/bash
    echo "user:x:1000:1000:deskbox user:/home/user:$shell" >> /etc/passwd
    grep -q '^user:' /etc/group || echo "user:x:1000:" >> /etc/group
    if [ -f /etc/shadow ] && ! grep -q '^user:' /etc/shadow; then echo 'user:!:19000:0:99999:7:::' >> /etc/shadow; fi
fi
uid=$(grep '^user:' /etc/passwd | cut -d: -f3)
[ "$uid" = 1000 ] || refuse "user 'user' has uid $uid; the desktop needs uid 1000"
if [ ! -d /home/user ]; then
    mkdir -p /home/user
    [ -d /etc/skel ] && cp -a /etc/skel/. /home/user/
    chown -R 1000:1000 /home/user
fi
mkdir -p /opt/deskbox /etc/deskbox /tmp
chmod 1777 /tmp
: > /etc/machine-id
cp /.deskbox-layer/template.json /etc/deskbox/template.json
chmod 0644 /etc/deskbox/template.json
rm -rf /.deskbox-layer
echo "deskbox layer: the image meets the runtime contract"
)SH";
}

std::string final_dockerfile(const std::string& from_image) {
    // COPY, not a volume: the files' digest is then part of the engine's cache key, so an
    // unchanged rebuild reuses this layer (and the same image id, and its exported rootfs).
    return "FROM " + from_image + "\nUSER root\nCOPY contract.sh template.json " + kLayerMount +
           "/\nRUN [\"/bin/sh\", \"" + kLayerMount + "/contract.sh\"]\n";
}

namespace {

std::vector<std::string> strings_of(const json& j, const char* key) {
    std::vector<std::string> out;
    if (auto it = j.find(key); it != j.end() && it->is_array())
        for (const auto& s : *it)
            if (s.is_string()) out.push_back(s.get<std::string>());
    return out;
}

}  // namespace

ImageConfig parse_image_config(const json& inspect) {
    ImageConfig c;
    const json& oci = inspect.at("OCIv1");
    const json config = oci.value("config", json::object());
    c.env = strings_of(config, "Env");
    c.cmd = strings_of(config, "Cmd");
    c.entrypoint = strings_of(config, "Entrypoint");
    c.working_dir = config.value("WorkingDir", "");
    c.user = config.value("User", "");
    if (auto labels = config.find("Labels"); labels != config.end() && labels->is_object())
        for (const auto& [k, v] : labels->items())
            if (v.is_string()) c.labels[k] = v.get<std::string>();
    if (auto rootfs = oci.find("rootfs"); rootfs != oci.end())
        c.layers = rootfs->value("diff_ids", json::array()).size();
    c.id = inspect.value("FromImageID", "");
    return c;
}

std::string join_command(const std::vector<std::string>& argv) {
    std::string line;
    for (const auto& word : argv) {
        if (!line.empty()) line += ' ';
        const bool plain = !word.empty() && word.find_first_of(" \t\n'\"") == std::string::npos;
        if (plain) {
            line += word;
            continue;
        }
        // '...' keeps everything but a single quote, which goes in "'" (the agent joins them).
        line += '\'';
        for (char c : word) {
            if (c == '\'')
                line += "'\"'\"'";
            else
                line += c;
        }
        line += '\'';
    }
    return line;
}

json make_definition(const TemplateRef& ref, const ImageConfig& config,
                     const BuildRequest& request) {
    json session = {{"window_manager", json::array()},
                    {"autostart", json::array()},
                    {"resolution", {1280, 800}},
                    {"dpi", 96}};
    if (auto it = config.labels.find(kSessionLabel); it != config.labels.end()) {
        try {
            auto base = json::parse(it->second);
            if (base.is_object())
                for (const auto& [k, v] : base.items()) session[k] = v;
        } catch (const json::exception&) {
        }
    }
    std::vector<std::string> start = request.start_command;
    if (start.empty()) {
        start = config.entrypoint;
        start.insert(start.end(), config.cmd.begin(), config.cmd.end());
    }
    if (!start.empty()) {
        if (!config.working_dir.empty() && config.working_dir != "/") {
            std::vector<std::string> in_dir = {"sh", "-c", "cd \"$0\" && exec \"$@\"",
                                               config.working_dir};
            in_dir.insert(in_dir.end(), start.begin(), start.end());
            start = std::move(in_dir);
        }
        session["autostart"] = json::array({start});
    }
    json env = json::object();
    for (const auto& kv : config.env) {
        auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        auto key = kv.substr(0, eq);
        if (key == "HOME" || key == "USER" || key == "LOGNAME" || key == "DISPLAY") continue;
        env[key] = kv.substr(eq + 1);
    }
    json definition = {
        {"name", ref.str()},
        {"description",
         request.kind == BuildKind::import ? "imported image" : "built from a Dockerfile"},
        {"env", env},
        {"session", session},
        {"user", {{"name", "user"}, {"uid", 1000}, {"gid", 1000}, {"home", "/home/user"}}},
        {"agent", "/opt/deskbox/bin/deskbox-agent"}};
    if (!config.working_dir.empty() && config.working_dir != "/")
        definition["workdir"] = config.working_dir;
    if (auto it = config.labels.find(kTemplateLabel); it != config.labels.end())
        definition["base"] = "deskbox/" + it->second;
    if (!request.ready.is_null()) definition["ready"] = request.ready;
    return definition;
}

std::optional<std::string> contract_refusal(const std::string& log) {
    std::istringstream in(log);
    std::string out;
    for (std::string line; std::getline(in, line);)
        if (auto at = line.find("deskbox-contract: "); at != std::string::npos)
            out += (out.empty() ? "" : "; ") + line.substr(at + 18);
    if (out.empty()) return std::nullopt;
    return out;
}

const char* to_string(BuildState state) {
    switch (state) {
        case BuildState::queued:
            return "queued";
        case BuildState::running:
            return "running";
        case BuildState::succeeded:
            return "succeeded";
        case BuildState::failed:
            return "failed";
        case BuildState::cancelled:
            return "cancelled";
    }
    return "unknown";
}

const char* to_string(BuildKind kind) {
    return kind == BuildKind::import ? "import" : "dockerfile";
}

}  // namespace deskbox::templates
