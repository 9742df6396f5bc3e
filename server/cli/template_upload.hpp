// What `deskbox template build` and `import` send: an upload to deskboxd in parts (POST, then
// PUT ?offset=N; a part refused with 503 is sent again after a pause), and the tar of a build
// context's listed entries, streamed from `tar` (links stay links: nothing outside is read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "server/client/api_client.hpp"

namespace deskbox::cli {

// Reads up to `size` bytes into `buffer`; 0 at the end.
using Reader = std::function<std::size_t(char* buffer, std::size_t size)>;

struct Upload {
    std::string id;
    std::uint64_t bytes = 0;
};

// Sends everything `read` gives as one upload, in parts of `part_bytes`. `check_interrupt` is
// called before each part (it throws to stop).
Upload upload_parts(client::ApiClient& client, const Reader& read, std::size_t part_bytes,
                    const std::function<void()>& check_interrupt);

// `tar` writing the archive of a context's entries ("./a", ...) to a pipe.
class TarStream {
  public:
    // `check_interrupt` is called when a read is interrupted by a signal (it throws to stop).
    TarStream(const std::filesystem::path& dir, const std::vector<std::string>& entries,
              std::function<void()> check_interrupt);
    ~TarStream();
    TarStream(const TarStream&) = delete;
    TarStream& operator=(const TarStream&) = delete;

    std::size_t read(char* buffer, std::size_t size);
    // Waits for tar; throws if it failed (its own messages went to stderr; exit status 1, "a
    // file changed as it was read", is not a failure).
    void finish();

  private:
    std::function<void()> check_interrupt_;
    std::string list_;
    ChildProcess child_;
};

}  // namespace deskbox::cli
