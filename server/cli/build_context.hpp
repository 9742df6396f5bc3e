// The build context `deskbox template build` sends: the files of a directory that its
// .dockerignore does not exclude, as Docker selects them, listed for tar (which writes the
// archive: symlinks stay links, so nothing outside the directory is ever read).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace deskbox::cli {

// The patterns of a .dockerignore, with Docker's meaning: one per line, '#' starts a comment
// line, '!' makes an exception; a pattern is cleaned (`./a//b/` is `a/b`, a leading '/' goes)
// and matched against the whole relative path with '*' (not '/'), '?', '[...]' and '**' (any
// number of directories); a path is also excluded when a pattern matches one of its parent
// directories. The last pattern that matches decides.
class IgnorePatterns {
  public:
    IgnorePatterns() = default;
    static IgnorePatterns parse(std::string_view text);
    // `path`: relative to the context, '/'-separated, without a leading "./".
    bool excluded(const std::string& path) const;
    bool has_exceptions() const { return exceptions_; }
    bool empty() const { return patterns_.empty(); }

  private:
    struct Pattern {
        std::regex regex;
        bool exception = false;
    };
    std::vector<Pattern> patterns_;
    bool exceptions_ = false;
};

struct ContextListing {
    // "./a", "./dir", "./dir/b", ...: directories, files and symlinks, sorted.
    std::vector<std::string> entries;
    std::size_t files = 0;     // regular files among them
    std::uint64_t bytes = 0;   // their sizes
    std::size_t excluded = 0;  // entries .dockerignore left out (an excluded tree counts once)
};

// The entries of `dir` that `ignore` does not exclude; `always` (relative paths such as
// "Dockerfile" and ".dockerignore") are kept whatever the patterns say, as Docker keeps them.
// Sockets, FIFOs and devices are left out. Throws std::runtime_error naming what it cannot read.
ContextListing list_context(const std::filesystem::path& dir, const IgnorePatterns& ignore,
                            const std::vector<std::string>& always);

// The Dockerfile a build names: its path inside the context when it lies there (sent with the
// context), else its text (read here; reached through a link or outside the context). `file`
// is -f's value; nullopt means the context's own "Dockerfile". Throws when there is none.
struct DockerfileChoice {
    std::optional<std::string> path_in_context;
    std::optional<std::string> text;
};
DockerfileChoice choose_dockerfile(const std::filesystem::path& dir,
                                   const std::optional<std::string>& file);

}  // namespace deskbox::cli
