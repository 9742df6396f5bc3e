#include "server/templates/build_types.hpp"

namespace deskbox::templates {

using nlohmann::json;

namespace {

BuildState state_of(const std::string& s) {
    for (auto state : {BuildState::queued, BuildState::running, BuildState::succeeded,
                       BuildState::failed, BuildState::cancelled})
        if (s == to_string(state)) return state;
    return BuildState::failed;
}

}  // namespace

json BuildInfo::to_json() const {
    json j = {{"build_id", id},
              {"kind", to_string(kind)},
              {"template", ref.str()},
              {"name", ref.name},
              {"tag", ref.tag},
              {"status", to_string(state)},
              {"step", step},
              {"steps", steps},
              {"cached_steps", cached_steps},
              {"created_at", created_at},
              {"log_bytes", log_bytes}};
    if (!instruction.empty()) j["instruction"] = instruction;
    if (!started_at.empty()) j["started_at"] = started_at;
    if (!finished_at.empty()) {
        j["finished_at"] = finished_at;
        j["seconds"] = seconds;
    }
    if (!image_id.empty()) j["image_id"] = image_id;
    if (failure) {
        json f = {{"code", failure->code}, {"message", failure->message}};
        if (failure->step > 0) f["step"] = failure->step;
        if (!failure->instruction.empty()) f["instruction"] = failure->instruction;
        if (failure->exit_code) f["exit_code"] = *failure->exit_code;
        if (!failure->log_tail.empty()) f["log_tail"] = failure->log_tail;
        j["error"] = f;
    }
    return j;
}

BuildInfo BuildInfo::from_json(const json& j) {
    BuildInfo b;
    b.id = j.at("build_id").get<std::string>();
    b.kind = j.value("kind", "") == "import" ? BuildKind::import : BuildKind::dockerfile;
    b.ref.name = j.at("name").get<std::string>();
    b.ref.tag = j.at("tag").get<std::string>();
    b.state = state_of(j.value("status", "failed"));
    b.step = j.value("step", 0);
    b.steps = j.value("steps", 0);
    b.cached_steps = j.value("cached_steps", 0);
    b.instruction = j.value("instruction", "");
    b.created_at = j.value("created_at", "");
    b.started_at = j.value("started_at", "");
    b.finished_at = j.value("finished_at", "");
    b.seconds = j.value("seconds", 0.0);
    b.image_id = j.value("image_id", "");
    b.log_bytes = j.value("log_bytes", std::uint64_t{0});
    if (auto e = j.find("error"); e != j.end() && e->is_object()) {
        BuildFailure f;
        f.code = e->value("code", "");
        f.message = e->value("message", "");
        f.step = e->value("step", 0);
        f.instruction = e->value("instruction", "");
        if (e->contains("exit_code")) f.exit_code = e->at("exit_code").get<int>();
        f.log_tail = e->value("log_tail", "");
        b.failure = f;
    }
    return b;
}

}  // namespace deskbox::templates
