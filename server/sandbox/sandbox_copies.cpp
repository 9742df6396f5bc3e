// SandboxManager's copies of sandboxes: named snapshots (saved, listed and started from any
// number of times) and forks (N copies of a running sandbox from one save).
#include <algorithm>
#include <chrono>
#include <future>
#include <semaphore>
#include <set>
#include <stdexcept>

#include "common/elapsed.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/sandbox/store_errors.hpp"

namespace deskbox::server {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {

// At most this many copies in one fork, and this many started at once.
constexpr std::ptrdiff_t kParallelStarts = 4;

// What a save of `sandbox` may write: its memory (a memory copy) and what it wrote to disk.
std::uint64_t expected_copy_bytes(const Sandbox& sandbox, runtime::CopyKind kind) {
    std::uint64_t bytes = sandbox.usage().disk_bytes.value_or(0);
    if (kind == runtime::CopyKind::memory) bytes += sandbox.config().limits.memory_mb << 20;
    return bytes;
}

}  // namespace

json SandboxManager::request_from_snapshot(const json& request) const {
    const auto& name = request["snapshot"];
    if (!name.is_string()) throw invalid_field("snapshot", "expected a snapshot's name");
    const auto info =
        as_sandbox_error([&] { return snapshots_->inspect(name.get<std::string>()); });
    json merged = info.settings;
    const bool memory = info.kind == runtime::to_string(runtime::CopyKind::memory);
    auto fixed = [&](const std::string& field, const json& saved) {
        return invalid_field(
            field, "comes from snapshot " + info.name + " (" + saved.dump() + "); leave it out");
    };
    // What the saved desktop is: a different value cannot be had from this snapshot.
    static const std::set<std::string> kFixed = {"template", "runtime", "resolution", "dpi",
                                                 "fast_start"};
    for (const auto& [key, value] : request.items()) {
        if (key == "snapshot") continue;
        if (key == "limits" && value.is_object() && merged["limits"].is_object()) {
            for (const auto& [limit, wanted] : value.items()) {
                const json saved = merged["limits"].value(limit, json());
                // A memory copy is a machine of that size.
                if (memory && (limit == "memory_mb" || limit == "cpus") && saved != wanted)
                    throw fixed("limits." + limit, saved);
                merged["limits"][limit] = wanted;
            }
            continue;
        }
        if (kFixed.count(key) && merged.value(key, json()) != value)
            throw fixed(key, merged.value(key, json()));
        merged[key] = value;
    }
    return merged;
}

void SandboxManager::boot_from_copy(Sandbox& sandbox, runtime::Runtime& runtime,
                                    const runtime::SandboxSpec& spec,
                                    const std::filesystem::path& dir,
                                    std::chrono::milliseconds timeout) {
    auto* copies = runtime.copy_starts();
    if (!copies)
        throw SandboxError(
            SandboxFault::invalid, "unsupported",
            std::string("the ") + runtime.name() + " runtime cannot start from a copy", "snapshot");
    if (auto problem = copies->copy_spec_problem(spec, dir); !problem.empty())
        throw SandboxError(SandboxFault::conflict, "snapshot_unusable", problem, "snapshot");
    // A memory copy is another sandbox's running guest: it gets its own hostname, clock and
    // randomness before anyone uses it. A filesystem copy boots afresh.
    const bool memory = copies->copy_kind() == runtime::CopyKind::memory;
    sandbox.boot([&] { return copies->start_from_copy(spec, dir); }, timeout, memory);
}

snapshots::SnapshotInfo SandboxManager::snapshot_sandbox(const std::string& id,
                                                         const SnapshotRequest& request) {
    auto sandbox = find(id);
    const std::string& name = request.name;
    sandbox->wake();
    auto* saving = runtime_for(sandbox->config().runtime_name).copy_starts();
    if (!saving)
        throw SandboxError(
            SandboxFault::invalid, "unsupported",
            "the " + sandbox->config().runtime_name + " runtime cannot save sandboxes");
    auto pending = as_sandbox_error([&] {
        return snapshots_->begin(name, expected_copy_bytes(*sandbox, saving->copy_kind()));
    });
    const auto saved = sandbox->save_copy(pending.copy_dir());
    snapshots::SnapshotInfo info;
    info.kind = runtime::to_string(saved.kind);
    info.runtime = sandbox->config().runtime_name;
    info.template_name = sandbox->config().template_name;
    info.source_sandbox = sandbox->id();
    info.created_at = std::chrono::system_clock::now();
    info.metadata = request.metadata;
    info.settings = sandbox->create_settings();
    auto kept = as_sandbox_error([&] { return pending.commit(info); });
    sandbox->audit("snapshot_saved",
                   {{"name", kept.name}, {"kind", kept.kind}, {"bytes", kept.size_bytes}});
    return kept;
}

json ForkResult::to_json(bool with_tokens) const {
    json copies = json::array();
    for (const auto& copy : sandboxes) copies.push_back(copy->describe(with_tokens));
    return {{"sandboxes", copies},
            {"kind", runtime::to_string(kind)},
            {"save_ms", save_ms},
            {"total_ms", total_ms}};
}

ForkResult SandboxManager::fork(const std::string& id, const ForkRequest& fork_request,
                                const std::vector<std::string>& ids) {
    const auto started = SteadyClock::now();
    auto source = find(id);
    const int count = fork_request.count;
    if (!ids.empty() && ids.size() != static_cast<std::size_t>(count))
        throw std::invalid_argument("a fork of " + std::to_string(count) + " given " +
                                    std::to_string(ids.size()) + " ids");
    {
        std::lock_guard lock(mutex_);
        const std::size_t free = free_places_locked();
        if (static_cast<std::size_t>(count) > free)
            throw SandboxError(SandboxFault::over_capacity, "too_many_sandboxes",
                               "a fork of " + std::to_string(count) + " needs " +
                                   std::to_string(count) +
                                   " free places; this server runs at most " +
                                   std::to_string(options_.max_sandboxes) + " sandboxes and has " +
                                   std::to_string(free) + " free",
                               "count");
    }
    source->wake();
    auto pending = snapshots_->begin_unnamed();
    const auto saved = source->save_copy(pending.copy_dir());
    const long long save_ms = ms_since(started);

    const SandboxConfig& from = source->config();
    json request = source->create_settings();
    request["metadata"] = fork_request.metadata ? json(*fork_request.metadata) : from.metadata;
    request["timeout_s"] = fork_request.timeout.value_or(from.timeout).count();
    request["on_timeout"] = from.pause_on_timeout ? "pause" : "kill";
    request["auto_resume"] = from.auto_resume;
    std::counting_semaphore<kParallelStarts> slots(kParallelStarts);
    std::vector<std::future<std::shared_ptr<Sandbox>>> starts;
    for (int i = 0; i < count; ++i)
        starts.push_back(std::async(std::launch::async, [&, i] {
            slots.acquire();
            struct Release {
                std::counting_semaphore<kParallelStarts>& s;
                ~Release() { s.release(); }
            } release{slots};
            return create_sandbox(request, ids.empty() ? std::string() : ids[i],
                                  pending.copy_dir());
        }));
    std::vector<std::shared_ptr<Sandbox>> made;
    std::exception_ptr failure;
    for (auto& start : starts) {
        try {
            made.push_back(start.get());
        } catch (...) {
            if (!failure) failure = std::current_exception();
        }
    }
    if (failure) {
        for (const auto& copy : made) {
            try {
                kill(copy->id());
            } catch (const std::exception&) {
            }
        }
        std::rethrow_exception(failure);
    }
    for (const auto& copy : made) copy->audit("forked", {{"from", source->id()}});
    source->audit("fork", {{"count", count}, {"kind", runtime::to_string(saved.kind)}});
    return {std::move(made), saved.kind, save_ms, ms_since(started)};
}

}  // namespace deskbox::server
