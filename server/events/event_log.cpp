#include "server/events/event_log.hpp"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <system_error>

namespace deskbox::server::events {

namespace {

std::system_error file_error(const std::string& what, const std::filesystem::path& path) {
    return std::system_error(errno, std::generic_category(), what + " " + path.string());
}

}  // namespace

std::optional<Event> EventLog::parse_line(const std::string& line) const {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    try {
        Event event = Event::from_json(j);
        if (event.node.empty()) event.node = node_;  // written here, before ids named a node
        return event;
    } catch (const std::exception&) {  // nlohmann's, or an id that is none
        return std::nullopt;
    }
}

EventLog::Subscription& EventLog::Subscription::operator=(Subscription&& other) noexcept {
    if (this != &other) {
        reset();
        log_ = std::exchange(other.log_, nullptr);
        key_ = other.key_;
    }
    return *this;
}

void EventLog::Subscription::reset() {
    if (!log_) return;
    std::lock_guard lock(log_->listeners_mutex_);
    log_->listeners_.erase(key_);
    log_ = nullptr;
}

EventLog::EventLog(const std::filesystem::path& dir, std::size_t kept_in_memory, std::string node)
    : path_(dir / "events.jsonl"), kept_in_memory_(kept_in_memory), node_(std::move(node)) {
    std::filesystem::create_directories(dir);
    fd_.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!fd_) throw file_error("cannot open the event log", path_);
    load();
}

void EventLog::load() {
    std::ifstream in(path_, std::ios::binary);
    std::string line;
    std::uint64_t offset = 0;
    while (std::getline(in, line)) {
        if (in.eof()) break;  // no newline after it: a partial last line
        if (auto event = parse_line(line); event && event->id > last_id_) {
            last_id_ = event->id;
            remember_locked(*event, offset);
        }
        offset += line.size() + 1;
    }
    size_ = offset;
    // Cut off a partial last line so the next event starts a line of its own.
    struct stat st {};
    if (::fstat(fd_.get(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) != size_ &&
        ::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0)
        throw file_error("cannot cut the partial last line of", path_);
}

void EventLog::remember_locked(const Event& event, std::optional<std::uint64_t> offset) {
    if (offset && (index_.empty() || event.id % kIndexEvery == 0)) index_[event.id] = *offset;
    recent_.push_back(event);
    if (recent_.size() > kept_in_memory_) recent_.pop_front();
}

Event EventLog::append(Event event) {
    {
        std::lock_guard lock(mutex_);
        event.id = last_id_ + 1;
        event.node = node_;
        event.time = event_time_now();
        const std::string line =
            event.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
        std::size_t written = 0;
        while (written < line.size()) {
            const ssize_t n = ::write(fd_.get(), line.data() + written, line.size() - written);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            written += static_cast<std::size_t>(n);
        }
        if (written == line.size()) {
            remember_locked(event, size_);
            size_ += line.size();
        } else {
            // Kept in memory for streams; the file gets no partial line to trip over later.
            std::fprintf(stderr, "deskboxd: event %llu not written to %s: %s\n",
                         static_cast<unsigned long long>(event.id), path_.c_str(),
                         std::strerror(errno));
            [[maybe_unused]] const int cut = ::ftruncate(fd_.get(), static_cast<off_t>(size_));
            remember_locked(event, std::nullopt);
        }
        last_id_ = event.id;
    }
    std::lock_guard lock(listeners_mutex_);
    for (auto& [key, listener] : listeners_) listener(event);
    return event;
}

std::uint64_t EventLog::last_id() const {
    std::lock_guard lock(mutex_);
    return last_id_;
}

std::optional<std::vector<Event>> EventLog::recent_after(std::uint64_t after,
                                                         std::size_t max) const {
    std::lock_guard lock(mutex_);
    std::vector<Event> out;
    if (after >= last_id_) return out;
    if (recent_.empty() || recent_.front().id > after + 1) return std::nullopt;
    for (const auto& event : recent_) {
        if (out.size() >= max) break;
        if (event.id > after) out.push_back(event);
    }
    return out;
}

std::vector<Event> EventLog::read_after(std::uint64_t after, std::size_t max) const {
    if (auto recent = recent_after(after, max)) return std::move(*recent);
    return read_file_after(after, max);
}

std::vector<Event> EventLog::read_file_after(std::uint64_t after, std::size_t max) const {
    std::shared_lock file_lock(file_mutex_);
    std::uint64_t start = 0, end = 0;
    {
        std::lock_guard lock(mutex_);
        end = size_;
        auto it = index_.upper_bound(after + 1);  // the last indexed id <= after + 1
        if (it != index_.begin()) start = std::prev(it)->second;
    }
    std::ifstream in(path_, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(start));
    std::vector<Event> out;
    std::string line;
    std::uint64_t offset = start;
    while (out.size() < max && offset < end && std::getline(in, line)) {
        offset += line.size() + 1;
        if (auto event = parse_line(line); event && event->id > after)
            out.push_back(std::move(*event));
    }
    return out;
}

std::uint64_t EventLog::size_bytes() const {
    std::lock_guard lock(mutex_);
    return size_;
}

std::uint64_t EventLog::first_id() const {
    std::lock_guard lock(mutex_);
    return index_.empty() ? last_id_ + 1 : index_.begin()->first;
}

std::size_t EventLog::trim(const std::string& keep_since, std::uint64_t keep_from_id) {
    std::unique_lock file_lock(file_mutex_);
    std::lock_guard lock(mutex_);
    std::ifstream in(path_, std::ios::binary);
    std::uint64_t offset = 0, first_kept_id = last_id_ + 1;
    std::size_t dropped = 0;
    for (std::string line; offset < size_ && std::getline(in, line); ++dropped) {
        // Ids and times only grow: the first event kept ends the dropped prefix.
        if (auto event = parse_line(line);
            event && (event->id >= keep_from_id || event->time >= keep_since)) {
            first_kept_id = event->id;
            break;
        }
        offset += line.size() + 1;
    }
    if (dropped == 0) return 0;
    replace_with_tail(offset);
    std::map<std::uint64_t, std::uint64_t> index;
    for (const auto& [id, at] : index_)
        if (at >= offset) index[id] = at - offset;
    if (first_kept_id <= last_id_ && offset < size_) index[first_kept_id] = 0;
    index_ = std::move(index);
    size_ -= offset;
    while (!recent_.empty() && recent_.front().id < first_kept_id) recent_.pop_front();
    return dropped;
}

void EventLog::replace_with_tail(std::uint64_t from) {
    const std::filesystem::path next = path_.string() + ".trim";
    UniqueFd out(::open(next.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!out) throw file_error("cannot write", next);
    UniqueFd source(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!source) throw file_error("cannot read", path_);
    off_t at = static_cast<off_t>(from);
    for (std::uint64_t left = size_ - from; left > 0;) {
        const ssize_t n = ::sendfile(out.get(), source.get(), &at, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            std::error_code ignored;
            std::filesystem::remove(next, ignored);
            throw file_error("cannot copy the event log's tail to", next);
        }
        left -= static_cast<std::uint64_t>(n);
    }
    if (::fsync(out.get()) != 0 || ::rename(next.c_str(), path_.c_str()) != 0) {
        std::error_code ignored;
        std::filesystem::remove(next, ignored);
        throw file_error("cannot replace", path_);
    }
    fd_.reset(::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC));
    if (!fd_) throw file_error("cannot open the event log", path_);
}

EventLog::Subscription EventLog::subscribe(Listener listener) {
    std::lock_guard lock(listeners_mutex_);
    const std::uint64_t key = next_listener_++;
    listeners_.emplace(key, std::move(listener));
    return Subscription(this, key);
}

}  // namespace deskbox::server::events
