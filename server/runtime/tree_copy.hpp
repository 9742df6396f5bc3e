// Copying a container's writable layer (an overlay upper dir) whole: contents, modes, owners,
// times, extended attributes (overlay's opaque marks, file capabilities), hard links, symlinks,
// FIFOs and the overlay's whiteouts (0/0 character devices), with owners moved from one
// sandbox's host id range to another's. What a named snapshot of a container saves, and what a
// sandbox started from one begins with.
#pragma once

#include <cstdint>
#include <filesystem>

namespace deskbox::runtime {

// Owners are moved: an id in [from_base, from_base + 65536) becomes to_base + (id - from_base);
// any other id (a file the guest cannot own) becomes to_base + 65534 ("nobody").
struct IdShift {
    std::uint32_t from_base = 0;
    std::uint32_t to_base = 0;
    std::uint32_t map(std::uint32_t id) const;
};

struct TreeCopyStats {
    std::uint64_t files = 0;  // every entry made (directories, links and specials included)
    std::uint64_t bytes = 0;  // of regular files' contents
};

// Copies what is inside `from` into `to` (an existing directory, which takes `from`'s own
// mode, owner, times and attributes too). Sockets are left out (nothing can use a saved one).
// Throws RuntimeError naming the path that failed (ENOSPC on `to` included); what was copied
// so far stays for the caller to remove.
TreeCopyStats copy_tree(const std::filesystem::path& from, const std::filesystem::path& to,
                        const IdShift& shift);

}  // namespace deskbox::runtime
