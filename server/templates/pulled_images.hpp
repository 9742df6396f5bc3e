// The registry images this server pulled into the build engine's storage: the digest each tag
// was last pulled at (so a build can use that copy while its registry cannot be reached) and
// when each image was last used (so unused pulls go after --template-pull-keep-h). A JSON file
// on the engine's disk beside the storage it describes, written whole; not thread-safe (the
// service holds a mutex around each use).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace deskbox::templates {

class PulledImages {
  public:
    using Time = std::chrono::system_clock::time_point;

    // Reads `file` (missing or unreadable: nothing recorded).
    explicit PulledImages(std::filesystem::path file);

    // `pinned` (registry/repository@sha256:...) was pulled or used at `at`; `tag_reference`
    // (registry/repository:tag, or empty for a pull by digest) now names it. Saved at once.
    void used(const std::string& tag_reference, const std::string& pinned, Time at);
    // The image `tag_reference` was last pulled at, if one is recorded.
    std::optional<std::string> pinned_for(const std::string& tag_reference) const;
    // The pinned images not in `keep` and last used at or before `cutoff`, forgotten (saved): the
    // caller removes them from the engine's storage.
    std::vector<std::string> take_unused(const std::set<std::string>& keep, Time cutoff);

  private:
    void save() const;

    struct Entry {
        std::set<std::string> tags;
        std::int64_t last_used = 0;  // seconds since the epoch
    };
    std::filesystem::path file_;
    std::map<std::string, Entry> images_;  // by pinned reference
};

}  // namespace deskbox::templates
