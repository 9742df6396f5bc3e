#include "server/runtime/microvm/derived_image.hpp"

#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "common/random.hpp"
#include "server/runtime/runtime.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* kTempPrefix = ".microvm.tmp-";
// Free space in the guest's root on top of the rootfs, as images/build_microvm.py gives it
// (sparse: no host disk until a sandbox writes, and then in its own qcow2 layer).
constexpr std::uint64_t kHeadroomBytes = 2ull << 30;

bool has_boot_files(const fs::path& dir) {
    std::error_code ec;
    return fs::is_regular_file(dir / "vmlinuz", ec) &&
           fs::is_regular_file(dir / "initramfs.img", ec);
}

struct RootfsWalk {
    std::uint64_t bytes = 0;  // blocks the files take (a file with several names once)
    std::string debugfs_script;
};

// Sizes the rootfs and writes the debugfs commands that give every directory in the image
// its sub-second mtime: mkfs.ext4 -d keeps whole seconds only, and fontconfig's caches
// record font directories' mtimes to the nanosecond; with them off, every X client in the
// guest rescans all fonts (half a minute under TCG). Only the image is written.
RootfsWalk walk_rootfs(const fs::path& rootfs) {
    RootfsWalk walk;
    std::set<std::pair<dev_t, ino_t>> seen;
    std::ostringstream script;
    auto add_dir = [&](const std::string& rel, const struct stat& st) {
        if (rel.find_first_of("\"\\\n") != std::string::npos) return;  // debugfs cannot quote it
        script << "set_inode_field \"" << rel << "\" mtime_extra "
               << (static_cast<std::uint64_t>(st.st_mtim.tv_nsec) << 2) << '\n';
    };
    struct stat st {};
    if (::lstat(rootfs.c_str(), &st) != 0) throw RuntimeError("cannot read " + rootfs.string());
    add_dir("/", st);
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(rootfs, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (::lstat(it->path().c_str(), &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) add_dir("/" + it->path().lexically_relative(rootfs).string(), st);
        if (S_ISREG(st.st_mode) && st.st_nlink > 1 && !seen.insert({st.st_dev, st.st_ino}).second)
            continue;
        walk.bytes += static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
    if (ec) throw RuntimeError("cannot read " + rootfs.string() + ": " + ec.message());
    walk.debugfs_script = script.str();
    return walk;
}

// rootfs.ext4 of `rootfs` at `image`: sized like images/build_microvm.py's, no journal, inode
// tables initialised now (no guest spends CPU on them), owned by root at the top.
void make_root_ext4(const fs::path& rootfs, const fs::path& image, const std::string& mkfs_ext4,
                    const RootfsWalk& walk) {
    const std::uint64_t mib = (walk.bytes + walk.bytes * 15 / 100 + kHeadroomBytes) / (1 << 20) + 1;
    check_tool(
        run_tool({mkfs_ext4, "-q", "-F", "-L", "deskbox-root", "-b", "4096", "-m", "0", "-O",
                  "^has_journal", "-E", "lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0",
                  "-d", rootfs.string(), image.string(), std::to_string(mib) + "M"},
                 600s, "e2fsprogs"),
        "mkfs.ext4 -d " + rootfs.string());
    const fs::path script = image.parent_path() / "mtimes.debugfs";
    write_file_atomic(script, walk.debugfs_script, 0600);
    auto fixed =
        run_tool({"debugfs", "-w", "-f", script.string(), image.string()}, 300s, "e2fsprogs");
    std::error_code ec;
    fs::remove(script, ec);
    check_tool(fixed, "debugfs on " + image.string());
    // debugfs reports a command's failure on stderr and still exits 0; its banner is not one.
    std::istringstream err(fixed.err);
    for (std::string line; std::getline(err, line);)
        if (!line.empty() && line.rfind("debugfs ", 0) != 0)
            throw RuntimeError("debugfs on " + image.string() + ": " + line);
}

}  // namespace

fs::path derived_bases_file(const fs::path& template_rootfs) {
    return template_rootfs.lexically_normal().parent_path() / "bases.json";
}

bool is_derived_template(const fs::path& template_rootfs) {
    std::error_code ec;
    return fs::is_regular_file(derived_bases_file(template_rootfs), ec);
}

std::optional<fs::path> derived_boot_dir(const fs::path& template_rootfs) {
    const fs::path file = derived_bases_file(template_rootfs);
    std::ifstream in(file);
    auto record = json::parse(in, nullptr, false);
    if (!in || !record.is_object() || !record.contains("shipped_rootfs") ||
        !record["shipped_rootfs"].is_array())
        throw RuntimeError("cannot read " + file.string());
    // Its own bases first, then the template that boots an image standing on none.
    for (const char* key : {"shipped_rootfs", "boot_from"}) {
        for (const auto& base : record.value(key, json::array())) {
            if (!base.is_string()) continue;
            fs::path dir =
                fs::path(base.get<std::string>()).lexically_normal().parent_path() / "microvm";
            if (has_boot_files(dir)) return dir;
        }
    }
    return std::nullopt;
}

DerivedImageMade make_derived_image(const fs::path& template_rootfs, const fs::path& boot_dir,
                                    const std::string& mkfs_ext4) {
    const auto started = std::chrono::steady_clock::now();
    const fs::path image_dir = template_rootfs.lexically_normal().parent_path();
    const fs::path out = image_dir / "microvm";
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(image_dir, ec))
        if (entry.path().filename().string().rfind(kTempPrefix, 0) == 0)
            fs::remove_all(entry.path(), ec);  // a killed maker's
    const fs::path temp = image_dir / (kTempPrefix + random::hex(4));
    try {
        make_dir(temp, 0755);
        // Links, so a rebuilt base (a newer kernel) leaves this image's boot files as they were.
        link_or_copy(boot_dir / "vmlinuz", temp / "vmlinuz");
        link_or_copy(boot_dir / "initramfs.img", temp / "initramfs.img");
        const RootfsWalk walk = walk_rootfs(template_rootfs);
        make_root_ext4(template_rootfs, temp / "rootfs.ext4", mkfs_ext4, walk);
        ::chmod((temp / "rootfs.ext4").c_str(), 0444);  // QEMU only ever reads it
        DerivedImageMade made{
            out, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()};
        json record = {{"derived_from", boot_dir.string()},
                       {"rootfs", template_rootfs.string()},
                       {"rootfs_bytes", walk.bytes},
                       {"rootfs_image_bytes", file_size_or_zero(temp / "rootfs.ext4")},
                       {"rootfs_image_seconds", made.seconds},
                       {"made_unix", static_cast<std::int64_t>(std::time(nullptr))}};
        write_file_atomic(temp / "build.json", record.dump(2) + "\n", 0644,
                          atomic_file::Durability::power_loss);
        atomic_file::sync_with_directory(temp / "rootfs.ext4");
        fs::rename(temp, out);
        return made;
    } catch (const std::exception& e) {
        fs::remove_all(temp, ec);
        throw RuntimeError("cannot make the microVM image of " + template_rootfs.string() + ": " +
                           e.what());
    }
}

}  // namespace deskbox::runtime
