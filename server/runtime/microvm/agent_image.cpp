#include "server/runtime/microvm/agent_image.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "server/runtime/content_hash.hpp"
#include "server/runtime/runtime.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// What is in an agent dir, cheaply: names, modes, sizes and mtimes (no content).
struct AgentDirListing {
    std::vector<fs::path> files;  // sorted
    std::uint64_t total_bytes = 0;
    std::string fingerprint;
};

AgentDirListing list_agent_dir(const fs::path& state_root, const fs::path& agent_dir) {
    AgentDirListing listing;
    std::error_code ec;
    listing.fingerprint = state_root.string() + '\n' + agent_dir.string() + '\n';
    for (auto it = fs::recursive_directory_iterator(agent_dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        listing.files.push_back(it->path());
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) != 0) continue;
        listing.total_bytes += static_cast<std::uint64_t>(st.st_size);
        listing.fingerprint += it->path().string() + ' ' + std::to_string(st.st_mode) + ' ' +
                               std::to_string(st.st_size) + ' ' +
                               std::to_string(st.st_mtim.tv_sec) + '.' +
                               std::to_string(st.st_mtim.tv_nsec) + '\n';
    }
    if (ec) throw RuntimeError("cannot read agent dir " + agent_dir.string() + ": " + ec.message());
    std::sort(listing.files.begin(), listing.files.end());
    return listing;
}

// The content address of the agent dir: relative names, modes, link targets, file bytes.
std::string content_hash(const fs::path& agent_dir, const std::vector<fs::path>& files) {
    std::error_code ec;
    Fnv64 hash;
    for (const auto& file : files) {
        hash.add(file.lexically_relative(agent_dir).string());
        struct stat st {};
        if (::lstat(file.c_str(), &st) != 0) continue;
        hash.add(std::to_string(st.st_mode));
        if (S_ISLNK(st.st_mode)) {
            hash.add(fs::read_symlink(file, ec).string());
        } else if (S_ISREG(st.st_mode)) {
            std::ifstream in(file, std::ios::binary);
            char buffer[1 << 16];
            while (in.read(buffer, sizeof buffer) || in.gcount() > 0)
                hash.add(buffer, static_cast<std::size_t>(in.gcount()));
        }
    }
    return hash.hex();
}

// mkfs.ext4 -d of `agent_dir` into `image` (through a temp file), read-only; then removes
// older agents' images beside it (running VMs keep their open files, new ones use this).
void make_image(const fs::path& agent_dir, std::uint64_t total_bytes, const fs::path& image,
                const std::string& mkfs_ext4) {
    std::error_code ec;
    const fs::path images = image.parent_path();
    fs::path temp = images / ("." + image.stem().string() + ".tmp");
    fs::remove(temp, ec);
    // ext4 needs room for its metadata on top of the files.
    std::uint64_t mib = (total_bytes + total_bytes / 4) / (1 << 20) + 8;
    auto result =
        run_tool({mkfs_ext4, "-q", "-F", "-L", "deskbox-agent", "-b", "4096", "-m", "0", "-N",
                  "256", "-O", "^has_journal", "-E", "lazy_itable_init=0,root_owner=0:0", "-d",
                  agent_dir.string(), temp.string(), std::to_string(mib) + "M"},
                 60s, "e2fsprogs");
    try {
        check_tool(result,
                   "making the agent image from " + agent_dir.string() + " (" + mkfs_ext4 + ")");
    } catch (const RuntimeError&) {
        fs::remove(temp, ec);
        throw;
    }
    ::chmod(temp.c_str(), 0444);
    fs::rename(temp, image, ec);
    if (ec) throw RuntimeError("cannot rename " + temp.string() + ": " + ec.message());
    for (const auto& entry : fs::directory_iterator(images, ec)) {
        auto name = entry.path().filename().string();
        if (name.rfind("agent-", 0) == 0 && entry.path() != image) fs::remove(entry.path(), ec);
    }
}

}  // namespace

fs::path AgentImages::image(const fs::path& state_root, const fs::path& agent_dir,
                            const std::string& mkfs_ext4) {
    AgentDirListing listing = list_agent_dir(state_root, agent_dir);
    std::error_code ec;
    std::lock_guard lock(mutex_);
    if (auto it = images_.find(listing.fingerprint);
        it != images_.end() && fs::exists(it->second, ec))
        return it->second;

    fs::path images = state_root / "microvm";
    fs::create_directories(images, ec);
    if (ec) throw RuntimeError("cannot create " + images.string() + ": " + ec.message());
    fs::path image = images / ("agent-" + content_hash(agent_dir, listing.files) + ".img");
    if (!fs::exists(image, ec)) make_image(agent_dir, listing.total_bytes, image, mkfs_ext4);
    images_[listing.fingerprint] = image;
    return image;
}

}  // namespace deskbox::runtime
