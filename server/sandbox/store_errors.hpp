// The stores' domain errors (volumes::VolumeError, snapshots::SnapshotError) as API errors: the
// one place their kinds become HTTP statuses and codes (routes, MCP and the sandbox create
// share it).
#pragma once

#include "server/sandbox/api_error.hpp"
#include "server/snapshots/snapshot_store.hpp"
#include "server/volumes/volume_store.hpp"

namespace deskbox::server {

inline ApiError to_api_error(const volumes::VolumeError& e) {
    using Kind = volumes::VolumeErrorKind;
    switch (e.kind()) {
        case Kind::invalid:
            return ApiError(400, "bad_request", e.what(), e.field());
        case Kind::not_found:
            return ApiError(404, "volume_not_found", e.what(), e.field());
        case Kind::exists:
            return ApiError(409, "volume_exists", e.what(), e.field());
        case Kind::in_use:
            return ApiError(409, "volume_in_use", e.what(), e.field());
        case Kind::no_space:
            return ApiError(507, "insufficient_storage", e.what(), e.field());
        case Kind::failed:
            break;
    }
    return ApiError(500, "volume_failed", e.what(), e.field());
}

inline ApiError to_api_error(const snapshots::SnapshotError& e) {
    using Kind = snapshots::SnapshotErrorKind;
    switch (e.kind()) {
        case Kind::invalid:
            return ApiError(400, "bad_request", e.what(), e.field());
        case Kind::not_found:
            return ApiError(404, "not_found", e.what(), e.field());
        case Kind::exists:
            return ApiError(409, "snapshot_exists", e.what(), e.field());
        case Kind::in_use:
            return ApiError(409, "snapshot_in_use", e.what(), e.field());
        case Kind::no_space:
            return ApiError(507, "insufficient_storage", e.what(), e.field());
        case Kind::failed:
            break;
    }
    return ApiError(500, "snapshot_failed", e.what(), e.field());
}

template <typename F>
auto as_api_error(F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const volumes::VolumeError& e) {
        throw to_api_error(e);
    } catch (const snapshots::SnapshotError& e) {
        throw to_api_error(e);
    }
}

}  // namespace deskbox::server
