// Named snapshots: saved copies of sandboxes (runtime::CopySaving) that outlive them and the
// server. Each is <root>/<name>/ holding snapshot.json (what the API shows, and the source's
// settings a start from it takes) and copy/ (the runtime's files). A snapshot is made in a
// hidden staging directory and appears by one rename, and goes by one rename before it is
// removed: after a SIGKILL it is whole or absent, and the next store removes the half-made.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::snapshots {

// What went wrong, for the front doors to map (HTTP status, JSON-RPC code) at the edge.
enum class SnapshotErrorKind { invalid, not_found, exists, in_use, no_space, failed };

class SnapshotError : public std::runtime_error {
  public:
    SnapshotError(SnapshotErrorKind kind, std::string field, const std::string& message)
        : std::runtime_error(message), kind_(kind), field_(std::move(field)) {}
    SnapshotErrorKind kind() const { return kind_; }
    const std::string& field() const { return field_; }

  private:
    SnapshotErrorKind kind_;
    std::string field_;
};

struct SnapshotInfo {
    std::string name;
    std::string kind;  // runtime::CopyKind's name: "memory" or "filesystem"
    std::string runtime;
    std::string template_name;
    std::string source_sandbox;
    std::chrono::system_clock::time_point created_at;
    std::uint64_t size_bytes = 0;
    nlohmann::json metadata = nlohmann::json::object();
    // The source's settings as a create request (template, runtime, resolution, dpi, limits,
    // env, network, ...): a start from the snapshot begins with them.
    nlohmann::json settings = nlohmann::json::object();

    nlohmann::json to_json() const;  // the API's view (settings: only what is not private)
    nlohmann::json to_record() const;
    static SnapshotInfo from_record(const nlohmann::json& record);  // throws json::exception
};

class SnapshotStore {
  public:
    struct Options {
        std::filesystem::path root;  // <state>/snapshots
    };
    // Removes what a killed server left half made or half deleted.
    explicit SnapshotStore(Options options);

    // A snapshot being made: the runtime saves into copy_dir(), then commit() makes it
    // visible. Destroyed uncommitted, it leaves nothing.
    class Pending {
      public:
        Pending(Pending&& other) noexcept;
        Pending& operator=(Pending&&) = delete;
        Pending(const Pending&) = delete;
        ~Pending();
        const std::filesystem::path& copy_dir() const { return copy_dir_; }
        // Throws SnapshotError: exists (made meanwhile under the same name), failed.
        SnapshotInfo commit(SnapshotInfo info);

      private:
        friend class SnapshotStore;
        Pending(const SnapshotStore& store, std::string name);
        const SnapshotStore* store_;
        std::string name_;
        std::filesystem::path staging_, copy_dir_;
        bool done_ = false;
    };

    // Throws SnapshotError: invalid (name), exists; no_space when the disk has less free
    // than `expected_bytes`.
    Pending begin(const std::string& name, std::uint64_t expected_bytes) const;
    std::vector<SnapshotInfo> list() const;
    SnapshotInfo inspect(const std::string& name) const;  // not_found
    // The runtime's files of snapshot `name` (not_found).
    std::filesystem::path copy_dir(const std::string& name) const;
    // Snapshot `name` held for a start from it: until the Use goes, remove() refuses it
    // (in_use) instead of pulling its files from under the start.
    class Use {
      public:
        Use(Use&& other) noexcept;
        Use& operator=(Use&&) = delete;
        Use(const Use&) = delete;
        ~Use();
        const std::filesystem::path& copy_dir() const { return copy_dir_; }

      private:
        friend class SnapshotStore;
        Use(SnapshotStore& store, std::string name, std::filesystem::path copy_dir);
        SnapshotStore* store_;
        std::string name_;
        std::filesystem::path copy_dir_;
    };
    Use use(const std::string& name);      // not_found
    void remove(const std::string& name);  // not_found, in_use
    // A copy that no one names (a fork's source): made and removed by its user.
    Pending begin_unnamed() const;

  private:
    std::filesystem::path dir_of(const std::string& name) const { return options_.root / name; }
    Options options_;
    std::mutex users_mutex_;
    std::map<std::string, int> users_;  // starts from each snapshot under way
};

}  // namespace deskbox::snapshots
