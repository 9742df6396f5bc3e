// The stores' domain errors (volumes::VolumeError, snapshots::SnapshotError) as SandboxErrors:
// the one place their kinds become faults and codes (routes, MCP and the sandbox create share
// it).
#pragma once

#include "server/sandbox/sandbox_error.hpp"
#include "server/secrets/secret_store.hpp"
#include "server/snapshots/snapshot_store.hpp"
#include "server/volumes/volume_store.hpp"

namespace deskbox::server {

inline SandboxError to_sandbox_error(const volumes::VolumeError& e) {
    using Kind = volumes::VolumeErrorKind;
    switch (e.kind()) {
        case Kind::invalid:
            return SandboxError(SandboxFault::invalid, "bad_request", e.what(), e.field());
        case Kind::not_found:
            return SandboxError(SandboxFault::not_found, "volume_not_found", e.what(), e.field());
        case Kind::exists:
            return SandboxError(SandboxFault::conflict, "volume_exists", e.what(), e.field());
        case Kind::in_use:
            return SandboxError(SandboxFault::conflict, "volume_in_use", e.what(), e.field());
        case Kind::no_space:
            return SandboxError(SandboxFault::no_space, "insufficient_storage", e.what(),
                                e.field());
        case Kind::guest_written:
            return SandboxError(SandboxFault::conflict, "volume_guest_written", e.what(),
                                e.field());
        case Kind::failed:
            break;
    }
    return SandboxError(SandboxFault::failed, "volume_failed", e.what(), e.field());
}

inline SandboxError to_sandbox_error(const snapshots::SnapshotError& e) {
    using Kind = snapshots::SnapshotErrorKind;
    switch (e.kind()) {
        case Kind::invalid:
            return SandboxError(SandboxFault::invalid, "bad_request", e.what(), e.field());
        case Kind::not_found:
            return SandboxError(SandboxFault::not_found, "not_found", e.what(), e.field());
        case Kind::exists:
            return SandboxError(SandboxFault::conflict, "snapshot_exists", e.what(), e.field());
        case Kind::in_use:
            return SandboxError(SandboxFault::conflict, "snapshot_in_use", e.what(), e.field());
        case Kind::no_space:
            return SandboxError(SandboxFault::no_space, "insufficient_storage", e.what(),
                                e.field());
        case Kind::failed:
            break;
    }
    return SandboxError(SandboxFault::failed, "snapshot_failed", e.what(), e.field());
}

inline SandboxError to_sandbox_error(const secrets::SecretError& e) {
    using Kind = secrets::SecretErrorKind;
    switch (e.kind()) {
        case Kind::invalid:
            return SandboxError(SandboxFault::invalid, "bad_request", e.what(), e.field());
        case Kind::not_found:
            return SandboxError(SandboxFault::not_found, "secret_not_found", e.what(), e.field());
        case Kind::too_many:
            return SandboxError(SandboxFault::conflict, "too_many_secrets", e.what(), e.field());
        case Kind::failed:
            break;
    }
    return SandboxError(SandboxFault::failed, "secret_failed", e.what(), e.field());
}

// Runs `f`, its store errors thrown as SandboxErrors.
template <typename F>
auto as_sandbox_error(F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const volumes::VolumeError& e) {
        throw to_sandbox_error(e);
    } catch (const snapshots::SnapshotError& e) {
        throw to_sandbox_error(e);
    } catch (const secrets::SecretError& e) {
        throw to_sandbox_error(e);
    }
}

}  // namespace deskbox::server
