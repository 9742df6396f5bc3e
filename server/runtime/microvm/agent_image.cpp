#include "server/runtime/microvm/agent_image.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "server/runtime/microvm/content_hash.hpp"
#include "server/runtime/runtime.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

fs::path AgentImages::image(const fs::path& state_root, const fs::path& agent_dir,
                            const std::string& mkfs_ext4) {
    std::vector<fs::path> files;
    std::error_code ec;
    std::uint64_t total = 0;
    std::string fingerprint = state_root.string() + '\n' + agent_dir.string() + '\n';
    for (auto it = fs::recursive_directory_iterator(agent_dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        files.push_back(it->path());
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) != 0) continue;
        total += static_cast<std::uint64_t>(st.st_size);
        fingerprint += it->path().string() + ' ' + std::to_string(st.st_mode) + ' ' +
                       std::to_string(st.st_size) + ' ' + std::to_string(st.st_mtim.tv_sec) + '.' +
                       std::to_string(st.st_mtim.tv_nsec) + '\n';
    }
    if (ec) throw RuntimeError("cannot read agent dir " + agent_dir.string() + ": " + ec.message());
    std::lock_guard lock(mutex_);
    if (auto it = images_.find(fingerprint); it != images_.end() && fs::exists(it->second, ec))
        return it->second;

    std::sort(files.begin(), files.end());
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
    fs::path images = state_root / "microvm";
    fs::create_directories(images, ec);
    if (ec) throw RuntimeError("cannot create " + images.string() + ": " + ec.message());
    fs::path image = images / ("agent-" + hash.hex() + ".img");
    if (!fs::exists(image, ec)) {
        fs::path temp = images / (".agent-" + hash.hex() + ".tmp");
        fs::remove(temp, ec);
        // ext4 needs room for its metadata on top of the files.
        std::uint64_t mib = (total + total / 4) / (1 << 20) + 8;
        auto result =
            run_tool({mkfs_ext4, "-q", "-F", "-L", "deskbox-agent", "-b", "4096", "-m", "0", "-N",
                      "256", "-O", "^has_journal", "-E", "lazy_itable_init=0,root_owner=0:0", "-d",
                      agent_dir.string(), temp.string(), std::to_string(mib) + "M"},
                     60s, "e2fsprogs");
        if (result.timed_out || result.status.exit_code != 0 || result.status.signal != 0) {
            fs::remove(temp, ec);
            throw RuntimeError("cannot make the agent image from " + agent_dir.string() + " (" +
                               mkfs_ext4 + "): " + trim(result.err + result.out));
        }
        ::chmod(temp.c_str(), 0444);
        fs::rename(temp, image, ec);
        if (ec) throw RuntimeError("cannot rename " + temp.string() + ": " + ec.message());
        // Older agents' images: running VMs keep their open files, new ones use this.
        for (const auto& entry : fs::directory_iterator(images, ec)) {
            auto name = entry.path().filename().string();
            if (name.rfind("agent-", 0) == 0 && entry.path() != image) fs::remove(entry.path(), ec);
        }
    }
    images_[fingerprint] = image;
    return image;
}

}  // namespace deskbox::runtime
