#include "server/snapshots/snapshot_store.hpp"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "common/atomic_file.hpp"
#include "common/random.hpp"
#include "common/resource_name.hpp"
#include "common/utc_time.hpp"

namespace deskbox::snapshots {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kRecord = "snapshot.json";
constexpr const char* kCopy = "copy";

long long to_unix(std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

std::uint64_t tree_bytes(const fs::path& dir) {
    std::uint64_t bytes = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != end(it);
         it.increment(ec)) {
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
            bytes += static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
    return bytes;
}

}  // namespace

json SnapshotInfo::to_json() const {
    json out = {{"name", name},
                {"kind", kind},
                {"runtime", runtime},
                {"template", template_name},
                {"source_sandbox", source_sandbox},
                {"created_at", utc_rfc3339(created_at)},
                {"size_bytes", size_bytes},
                {"metadata", metadata}};
    // What a start from it keeps; env and network policy may hold what only the owner sees.
    for (const char* key : {"resolution", "limits"})
        if (settings.contains(key)) out[key] = settings[key];
    return out;
}

json SnapshotInfo::to_record() const {
    json record = to_json();
    record["created_unix"] = to_unix(created_at);
    record["settings"] = settings;
    return record;
}

SnapshotInfo SnapshotInfo::from_record(const json& r) {
    SnapshotInfo info;
    info.name = r.at("name");
    info.kind = r.at("kind");
    info.runtime = r.at("runtime");
    info.template_name = r.at("template");
    info.source_sandbox = r.value("source_sandbox", "");
    info.created_at = std::chrono::system_clock::time_point(
        std::chrono::seconds(r.at("created_unix").get<long long>()));
    info.size_bytes = r.value("size_bytes", std::uint64_t{0});
    info.metadata = r.value("metadata", json::object());
    info.settings = r.at("settings");
    return info;
}

SnapshotStore::SnapshotStore(Options options) : options_(std::move(options)) {
    fs::create_directories(options_.root);
    ::chmod(options_.root.c_str(), 0700);
    // Hidden entries are half made (.creating-), half removed (.deleting-) or a fork's source
    // (.fork-): none is a snapshot once its server is gone.
    std::error_code ec;
    std::vector<fs::path> leftovers;
    for (const auto& entry : fs::directory_iterator(options_.root, ec))
        if (entry.path().filename().string().starts_with(".")) leftovers.push_back(entry.path());
    for (const auto& path : leftovers) {
        fs::remove_all(path, ec);
        if (ec)
            std::fprintf(stderr, "deskboxd: removing %s: %s\n", path.c_str(), ec.message().c_str());
    }
}

SnapshotStore::Pending::Pending(const SnapshotStore& store, std::string name)
    : store_(&store), name_(std::move(name)) {
    const std::string prefix = name_.empty() ? ".fork-" : ".creating-" + name_ + "-";
    staging_ = store.options_.root / (prefix + random::hex(4));
    copy_dir_ = staging_ / kCopy;
    fs::create_directories(staging_);
}

SnapshotStore::Pending::Pending(Pending&& other) noexcept
    : store_(other.store_),
      name_(std::move(other.name_)),
      staging_(std::move(other.staging_)),
      copy_dir_(std::move(other.copy_dir_)),
      done_(other.done_) {
    other.done_ = true;
}

SnapshotStore::Pending::~Pending() {
    if (done_) return;
    std::error_code ec;
    fs::remove_all(staging_, ec);
}

SnapshotInfo SnapshotStore::Pending::commit(SnapshotInfo info) {
    if (name_.empty()) throw SnapshotError(SnapshotErrorKind::failed, "name", "a fork's copy");
    info.name = name_;
    info.size_bytes = tree_bytes(copy_dir_);
    try {
        atomic_file::write(staging_ / kRecord, info.to_record().dump(2) + '\n',
                           {.mode = 0600, .durability = atomic_file::Durability::power_loss});
    } catch (const std::exception& e) {
        throw SnapshotError(SnapshotErrorKind::failed, "name",
                            "cannot write snapshot " + name_ + "'s record: " + e.what());
    }
    // rename(2) onto an existing non-empty directory fails: the first of two makers wins.
    std::error_code ec;
    fs::rename(staging_, store_->dir_of(name_), ec);
    if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists)
        throw SnapshotError(SnapshotErrorKind::exists, "name",
                            "a snapshot named " + name_ + " was made meanwhile");
    if (ec)
        throw SnapshotError(SnapshotErrorKind::failed, "name",
                            "cannot keep snapshot " + name_ + ": " + ec.message());
    done_ = true;
    atomic_file::sync_with_directory(store_->dir_of(name_));
    return info;
}

SnapshotStore::Pending SnapshotStore::begin(const std::string& name,
                                            std::uint64_t expected_bytes) const {
    if (auto problem = resource_name_problem(name); !problem.empty())
        throw SnapshotError(SnapshotErrorKind::invalid, "name", "a snapshot name " + problem);
    std::error_code ec;
    if (fs::exists(dir_of(name), ec))
        throw SnapshotError(SnapshotErrorKind::exists, "name",
                            "a snapshot named " + name + " exists; delete it or pick another name");
    struct statvfs st {};
    if (::statvfs(options_.root.c_str(), &st) == 0) {
        const std::uint64_t free_bytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
        if (free_bytes < expected_bytes)
            throw SnapshotError(SnapshotErrorKind::no_space, "name",
                                "the snapshot needs about " + std::to_string(expected_bytes >> 20) +
                                    " MiB and " + options_.root.string() + " has " +
                                    std::to_string(free_bytes >> 20) + " MiB free");
    }
    return Pending(*this, name);
}

SnapshotStore::Pending SnapshotStore::begin_unnamed() const {
    return Pending(*this, "");
}

std::vector<SnapshotInfo> SnapshotStore::list() const {
    std::vector<SnapshotInfo> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(options_.root, ec)) {
        const std::string name = entry.path().filename().string();
        if (!resource_name_problem(name).empty()) continue;
        try {
            out.push_back(inspect(name));
        } catch (const SnapshotError&) {
            // Removed meanwhile, or a damaged record: not listed.
        }
    }
    std::sort(out.begin(), out.end(),
              [](const SnapshotInfo& a, const SnapshotInfo& b) { return a.name < b.name; });
    return out;
}

SnapshotInfo SnapshotStore::inspect(const std::string& name) const {
    if (!resource_name_problem(name).empty())
        throw SnapshotError(SnapshotErrorKind::not_found, "snapshot", "no snapshot named " + name);
    std::ifstream in(dir_of(name) / kRecord);
    if (!in)
        throw SnapshotError(SnapshotErrorKind::not_found, "snapshot", "no snapshot named " + name);
    try {
        return SnapshotInfo::from_record(json::parse(in));
    } catch (const json::exception& e) {
        throw SnapshotError(SnapshotErrorKind::failed, "snapshot",
                            "snapshot " + name + " has an unreadable record: " + e.what());
    }
}

fs::path SnapshotStore::copy_dir(const std::string& name) const {
    inspect(name);
    return dir_of(name) / kCopy;
}

SnapshotStore::Use::Use(SnapshotStore& store, std::string name, fs::path copy_dir)
    : store_(&store), name_(std::move(name)), copy_dir_(std::move(copy_dir)) {}

SnapshotStore::Use::Use(Use&& other) noexcept
    : store_(other.store_), name_(std::move(other.name_)), copy_dir_(std::move(other.copy_dir_)) {
    other.store_ = nullptr;
}

SnapshotStore::Use::~Use() {
    if (!store_) return;
    std::lock_guard lock(store_->users_mutex_);
    if (--store_->users_[name_] <= 0) store_->users_.erase(name_);
}

SnapshotStore::Use SnapshotStore::use(const std::string& name) {
    std::lock_guard lock(users_mutex_);
    fs::path dir = copy_dir(name);  // under the lock: a remove cannot slip in between
    ++users_[name];
    return Use(*this, name, std::move(dir));
}

void SnapshotStore::remove(const std::string& name) {
    std::lock_guard lock(users_mutex_);
    inspect(name);
    if (users_.count(name))
        throw SnapshotError(
            SnapshotErrorKind::in_use, "snapshot",
            "a sandbox is starting from snapshot " + name + "; delete it once the start is done");
    // Gone from the listing by one rename; sandboxes started from it hold their own links
    // and copies of its files.
    const fs::path doomed = options_.root / (".deleting-" + name + "-" + random::hex(4));
    std::error_code ec;
    fs::rename(dir_of(name), doomed, ec);
    if (ec == std::errc::no_such_file_or_directory)
        throw SnapshotError(SnapshotErrorKind::not_found, "snapshot", "no snapshot named " + name);
    if (ec)
        throw SnapshotError(SnapshotErrorKind::failed, "snapshot",
                            "cannot delete snapshot " + name + ": " + ec.message());
    fs::remove_all(doomed, ec);
}

}  // namespace deskbox::snapshots
