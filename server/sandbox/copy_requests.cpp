#include "server/sandbox/copy_requests.hpp"

#include "server/sandbox/request_reader.hpp"

namespace deskbox::server {

SnapshotRequest parse_snapshot_request(const nlohmann::json& body) {
    RequestReader reader(body);
    SnapshotRequest request;
    request.name = reader.required_string("name", 63);
    request.metadata = reader.string_map("metadata", 64).value_or(request.metadata);
    reader.finish();
    return request;
}

ForkRequest parse_fork_request(const nlohmann::json& body, std::chrono::seconds max_timeout) {
    // No body at all: one copy with the source's settings.
    if (body.is_null()) return {};
    RequestReader reader(body);
    ForkRequest request;
    request.count = static_cast<int>(reader.integer("count", 1, kMaxForkCount).value_or(1));
    request.metadata = reader.string_map("metadata", 64);
    if (auto timeout = reader.integer("timeout_s", 1, max_timeout.count()))
        request.timeout = std::chrono::seconds(*timeout);
    reader.finish();
    return request;
}

}  // namespace deskbox::server
