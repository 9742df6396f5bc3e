// The templates users built or imported, on disk under <state>/templates/:
//   store/<name>/<tag>.json   one record per tag (what the server reads to create from it)
//   images/<image>/rootfs     the root filesystem both runtimes start from, one per image, so
//                             tags of the same image share it
//   images/<image>/bases.json {"shipped_rootfs": [...]}: the shipped templates' rootfs it was
//                             built FROM; runtimes keep what they make of the image (a disk
//                             image, its snapshots) beside these, and it all goes with the folder
// Records are replaced atomically; a rootfs appears only complete (built beside, renamed).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/templates/template_ref.hpp"

namespace deskbox::templates {

struct StoredTemplate {
    TemplateRef ref;
    std::string image_id;       // the engine's id of the final image (64 hex)
    nlohmann::json definition;  // template.json as the server reads it (session, env, ready)
    std::string base;           // the first FROM, or the imported archive's name
    // The base pinned to the digest it was pulled at (registry/repository@sha256:...) when it
    // came from a registry; empty otherwise. `pulled`: every registry image the build used so.
    std::string base_digest;
    std::vector<std::string> pulled;
    // The user's image's OCI config (Env, Cmd, Entrypoint, WorkingDir, User, Labels) before
    // deskbox's layer: what a build FROM this template inherits where the engine lacks the
    // image (it came from another node, or the engine's storage was made anew). Null in records
    // written before it was kept.
    nlohmann::json image_config;
    std::size_t layers = 0;
    double build_seconds = 0;
    std::uint64_t bytes = 0;  // the rootfs's size
    std::string created_at;   // RFC 3339
    std::string build_id;

    nlohmann::json to_json() const;
    static StoredTemplate from_json(const nlohmann::json& j);  // throws nlohmann::json::exception
};

class TemplateStore {
  public:
    explicit TemplateStore(std::filesystem::path dir);

    std::optional<StoredTemplate> find(const TemplateRef& ref) const;
    std::vector<StoredTemplate> list() const;
    // The rootfs of an image (exists or not) and the folder it is built in before that.
    std::filesystem::path rootfs_of(const std::string& image_id) const;
    std::filesystem::path image_dir(const std::string& image_id) const;
    void put(const StoredTemplate& stored);
    // Removes the record; false if there was none.
    bool remove(const TemplateRef& ref);
    // Deletes image folders no record names, unless `in_use` says a sandbox may still start
    // from or run on that rootfs. Returns how many went.
    std::size_t collect_garbage(const std::function<bool(const std::filesystem::path&)>& in_use);

    const std::filesystem::path& dir() const { return dir_; }
    // Counts puts and removals: what was read from the store at one count is still true.
    std::uint64_t generation() const { return generation_.load(); }

  private:
    std::filesystem::path record_path(const TemplateRef& ref) const;
    std::filesystem::path dir_;
    mutable std::mutex mutex_;
    std::atomic<std::uint64_t> generation_{0};
};

}  // namespace deskbox::templates
