#include "server/sandbox/command_streams.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "common/base64.hpp"
#include "common/utf8.hpp"

namespace deskbox::server {

std::shared_ptr<CommandStreams::Backlog> CommandStreams::backlog_locked(pid_t pid) {
    auto& backlog = backlogs_[pid];
    if (backlog) return backlog;
    backlog = std::make_shared<Backlog>();
    // Commands nobody watches (background ones' exits, a watcher that never came): the oldest
    // is forgotten so a busy sandbox's host memory stays bounded.
    std::size_t unwatched = 0;
    for (const auto& [_, b] : backlogs_) unwatched += !b->watched;
    while (unwatched > kMaxUnwatched) {
        auto oldest = backlogs_.end();
        for (auto it = backlogs_.begin(); it != backlogs_.end(); ++it)
            if (!it->second->watched && it->first != pid &&
                (oldest == backlogs_.end() || it->second->since < oldest->second->since))
                oldest = it;
        if (oldest == backlogs_.end()) break;
        backlogs_.erase(oldest);
        --unwatched;
    }
    return backlog;
}

void CommandStreams::push_locked(pid_t pid, CommandEvent event) {
    auto backlog = backlog_locked(pid);
    if (backlog->ended) return;
    if (event.kind == CommandEvent::Kind::output) {
        if (backlog->overflowed) return;
        if (backlog->bytes + event.data.size() > kMaxQueuedBytes) {
            // A watcher that does not keep up (a client reading slowly) loses output, not
            // the host's memory; it is told where.
            backlog->overflowed = true;
            event.data =
                "[deskbox: output dropped here: more than 16 MiB waited for the "
                "client]\n";
            event.stream = "stderr";
        }
        backlog->bytes += event.data.size();
    } else {
        backlog->ended = true;
    }
    backlog->events.push_back(std::move(event));
    arrived_.notify_all();
}

void CommandStreams::output(pid_t pid, const std::string& stream, std::string bytes) {
    std::lock_guard lock(mutex_);
    push_locked(pid, {CommandEvent::Kind::output, stream, std::move(bytes)});
}

void CommandStreams::exited(pid_t pid, int exit_code, int signal) {
    std::lock_guard lock(mutex_);
    CommandEvent event;
    event.kind = CommandEvent::Kind::exit;
    event.exit_code = exit_code;
    event.signal = signal;
    push_locked(pid, std::move(event));
}

void CommandStreams::lost(const std::string& why) {
    std::lock_guard lock(mutex_);
    lost_ = why;
    for (auto it = backlogs_.begin(); it != backlogs_.end();) {
        if (!it->second->watched) {
            it = backlogs_.erase(it);
            continue;
        }
        CommandEvent event;
        event.kind = CommandEvent::Kind::lost;
        event.data = why;
        push_locked(it->first, std::move(event));
        ++it;
    }
}

void CommandStreams::reconnected() {
    std::lock_guard lock(mutex_);
    lost_.reset();
}

std::unique_ptr<CommandStreams::Watch> CommandStreams::watch(pid_t pid) {
    std::lock_guard lock(mutex_);
    auto backlog = backlog_locked(pid);
    if (backlog->watched) throw std::logic_error("command " + std::to_string(pid) + " is watched");
    backlog->watched = true;
    if (lost_ && !backlog->ended) {
        backlog->ended = true;
        backlog->events.push_back({CommandEvent::Kind::lost, "", *lost_});
    }
    return std::unique_ptr<Watch>(new Watch(*this, pid, std::move(backlog)));
}

void CommandStreams::unwatch(pid_t pid) {
    std::lock_guard lock(mutex_);
    backlogs_.erase(pid);  // a later command with this pid starts afresh
}

CommandStreams::Watch::~Watch() {
    owner_.unwatch(pid_);
}

void CommandStreams::Watch::interrupt() {
    std::lock_guard lock(owner_.mutex_);
    backlog_->interrupted = true;
    owner_.arrived_.notify_all();
}

std::optional<CommandEvent> CommandStreams::Watch::next(
    std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(owner_.mutex_);
    owner_.arrived_.wait_until(lock, deadline,
                               [&] { return backlog_->interrupted || !backlog_->events.empty(); });
    if (std::exchange(backlog_->interrupted, false)) {
        CommandEvent interrupted;
        interrupted.kind = CommandEvent::Kind::interrupted;
        return interrupted;
    }
    if (backlog_->events.empty()) return std::nullopt;
    CommandEvent event = std::move(backlog_->events.front());
    backlog_->events.pop_front();
    if (event.kind == CommandEvent::Kind::output) backlog_->bytes -= event.data.size();
    return event;
}

nlohmann::json CommandOutputText::as_json(const std::string& stream, const std::string& bytes) {
    nlohmann::json out = {{"stream", stream}};
    if (utf8::is_valid(bytes)) {
        out["data"] = bytes;
    } else {
        out["data"] = utf8::to_valid(bytes);
        out["data_b64"] = base64_encode(bytes);
    }
    return out;
}

nlohmann::json CommandOutputText::take(const CommandEvent& output) {
    std::string& carry = carry_[output.stream];
    std::string bytes = std::move(carry) + output.data;
    carry.clear();
    const std::size_t whole = utf8::trim_partial(bytes);
    // Only a cut character at the end waits (at most 3 bytes); anything else goes now.
    if (whole < bytes.size() && bytes.size() - whole < 4 &&
        utf8::is_valid(bytes.substr(0, whole))) {
        carry = bytes.substr(whole);
        bytes.resize(whole);
    }
    if (bytes.empty()) return nullptr;
    return as_json(output.stream, bytes);
}

nlohmann::json CommandOutputText::flush() {
    for (auto& [stream, carry] : carry_)
        if (!carry.empty()) return as_json(stream, std::exchange(carry, {}));
    return nullptr;
}

}  // namespace deskbox::server
