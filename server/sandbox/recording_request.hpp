// A recording's options, read once the same way wherever they come from: POST .../recording,
// a create request's "record", and the server record of an adopted sandbox that was recording.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/sandbox/request_reader.hpp"

namespace deskbox::server {

struct RecordingRequest {
    bool actions = false;  // also write the audit events as an actions track
    int fps = 30;          // 1..60

    nlohmann::json to_json() const { return {{"actions", actions}, {"fps", fps}}; }
};

// {"actions": bool, "fps": 1..60}; throws SandboxError (invalid) naming the field (under `prefix`).
inline RecordingRequest read_recording_request(const nlohmann::json& body,
                                               const std::string& prefix = {}) {
    RequestReader reader(body, prefix);
    RecordingRequest request;
    request.actions = reader.boolean("actions").value_or(false);
    request.fps = static_cast<int>(reader.integer("fps", 1, 60).value_or(30));
    reader.finish();
    return request;
}

}  // namespace deskbox::server
