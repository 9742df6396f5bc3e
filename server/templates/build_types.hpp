// What a template build is asked to do and what it reports: the typed request a route parses
// its body into, the build's state as the API shows it, and the domain's one error type, which
// only the routes turn into HTTP statuses.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/network/network_policy.hpp"
#include "server/templates/template_ref.hpp"

namespace deskbox::templates {

enum class BuildKind { dockerfile, import };

struct BuildLimits {
    std::uint64_t memory_mb = 4096;  // each RUN step's container
    double cpus = 0;                 // 0: no CPU quota
    std::uint64_t pids = 4096;
    // What one build may add to the engine's disk (its layers, its cache, what it pulls); 0:
    // whatever the disk has free (the disk itself is capped: --template-disk-gb).
    std::uint64_t disk_mb = 0;
};

struct BuildRequest {
    BuildKind kind = BuildKind::dockerfile;
    TemplateRef ref;
    // An upload (POST /v1/templates/uploads): the build context as a tar, or the image archive
    // to import. Empty: a Dockerfile-only build with an empty context.
    std::string upload_id;
    std::string dockerfile;                      // inline text; empty: dockerfile_path
    std::string dockerfile_path = "Dockerfile";  // inside the context
    std::map<std::string, std::string> build_args;
    bool no_cache = false;
    // Started in the desktop session once it is up; empty: the image's ENTRYPOINT + CMD.
    std::vector<std::string> start_command;
    nlohmann::json ready;        // null: the template default; else template.json's "ready"
    std::string archive_format;  // import: "oci-archive", "docker-archive" or "" (detect)
    // import by reference instead of an upload: an image in an allowed registry
    // (registry.example:5000/team/app:1, or @sha256:...).
    std::string image;
    network::NetworkPolicy network = network::NetworkPolicy::open();
    std::chrono::seconds timeout{1800};
    BuildLimits limits;
};

enum class BuildState { queued, running, succeeded, failed, cancelled };
const char* to_string(BuildState state);
const char* to_string(BuildKind kind);

struct BuildFailure {
    // step_failed, contract, timeout, cancelled, restarted, engine, context, pull_failed
    std::string code;
    std::string message;
    int step = 0;  // the Dockerfile step that failed (1-based), 0 if none
    std::string instruction;
    std::optional<int> exit_code;
    std::string log_tail;
};

struct BuildInfo {
    std::string id;
    BuildKind kind = BuildKind::dockerfile;
    TemplateRef ref;
    BuildState state = BuildState::queued;
    int step = 0, steps = 0;  // "STEP 3/8" as the engine reports it
    std::string instruction;  // the step running now
    int cached_steps = 0;     // steps the layer cache answered
    std::string created_at, started_at, finished_at;
    double seconds = 0;
    std::optional<BuildFailure> failure;
    std::string image_id;
    std::uint64_t log_bytes = 0;

    bool finished() const {
        return state == BuildState::succeeded || state == BuildState::failed ||
               state == BuildState::cancelled;
    }
    nlohmann::json to_json() const;
    static BuildInfo from_json(const nlohmann::json& j);
};

// A piece of a build's log from a byte offset (the resumable way to follow it).
struct LogChunk {
    std::string text;  // valid UTF-8 (invalid bytes replaced); never ends inside a character
    std::uint64_t offset = 0, next_offset = 0;
    bool complete = false;  // the build has finished and nothing is left after next_offset
    BuildState state = BuildState::queued;
};

class TemplateError : public std::runtime_error {
  public:
    enum class Code { invalid, not_found, conflict, too_large, unavailable };
    TemplateError(Code code, const std::string& message, std::string field = {})
        : std::runtime_error(message), code_(code), field_(std::move(field)) {}
    Code code() const { return code_; }
    const std::string& field() const { return field_; }

  private:
    Code code_;
    std::string field_;
};

}  // namespace deskbox::templates
