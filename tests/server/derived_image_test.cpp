// The microVM image of a template of the store (server/runtime/microvm/derived_image.hpp), made
// from a small rootfs with real mkfs.ext4 and debugfs: once, whole, with its base's boot files,
// and without writing the rootfs or the base. No QEMU.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "server/runtime/microvm/derived_image.hpp"
#include "server/runtime/microvm/runtime.hpp"

namespace deskbox::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Layout {
    TempDir dir{"deskbox-derived-image"};
    fs::path base_rootfs() const { return dir.path() / "cache" / "minimal-0123" / "rootfs"; }
    fs::path base_boot() const { return base_rootfs().parent_path() / "microvm"; }
    fs::path image() const { return dir.path() / "state" / "templates" / "images" / "abc"; }
    fs::path rootfs() const { return image() / "rootfs"; }

    Layout() {
        fs::create_directories(base_rootfs() / "etc");
        std::ofstream(base_rootfs() / "etc" / "shared") << "from the base\n";
        fs::create_directories(rootfs() / "usr" / "share" / "fonts");
        fs::create_directories(rootfs() / "etc");
        std::ofstream(rootfs() / "etc" / "hello") << "hello from the image\n";
        // As the store's export does: a file unchanged from the base is a hard link of it.
        fs::create_hard_link(base_rootfs() / "etc" / "shared", rootfs() / "etc" / "shared");
        set_mtime(rootfs() / "usr" / "share" / "fonts", 1700000000, 123456789);
        std::ofstream(image() / "bases.json")
            << nlohmann::json{{"shipped_rootfs", {base_rootfs().string()}}}.dump();
    }
    void build_base_boot() const {
        fs::create_directories(base_boot());
        std::ofstream(base_boot() / "vmlinuz") << "kernel";
        std::ofstream(base_boot() / "initramfs.img") << "initramfs";
    }
    static void set_mtime(const fs::path& path, time_t sec, long nsec) {
        timespec times[2] = {{sec, nsec}, {sec, nsec}};
        ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
    }
};

std::string debugfs(const fs::path& image, const std::string& request) {
    return run_process({"debugfs", "-R", request, image.string()}, 30s).out;
}

struct stat stat_of(const fs::path& path) {
    struct stat st {};
    ::lstat(path.c_str(), &st);
    return st;
}

TEST(DerivedImage, IsMadeOnceFromTheRootfsWithItsBasesBootFiles) {
    if (run_process({"sh", "-c", "command -v mkfs.ext4 && command -v debugfs"}).status.exit_code)
        GTEST_SKIP() << "needs e2fsprogs";
    Layout l;
    l.build_base_boot();
    MicrovmRuntime runtime;
    EXPECT_TRUE(is_derived_template(l.rootfs()));
    EXPECT_NO_THROW(runtime.check_template(l.rootfs())) << "offered before its image is made";
    EXPECT_FALSE(fs::exists(l.image() / "microvm"));
    fs::create_directories(l.image() / ".microvm.tmp-dead");  // a killed maker's
    const auto fonts_before = stat_of(l.rootfs() / "usr" / "share" / "fonts");
    const auto shared_before = stat_of(l.rootfs() / "etc" / "shared");

    MicrovmImage image = runtime.made_image_for(l.rootfs());
    EXPECT_EQ(image.dir, l.image() / "microvm");
    EXPECT_EQ(stat_of(image.kernel).st_ino, stat_of(l.base_boot() / "vmlinuz").st_ino);
    EXPECT_EQ(stat_of(image.initramfs).st_ino, stat_of(l.base_boot() / "initramfs.img").st_ino);
    EXPECT_EQ(debugfs(image.rootfs, "cat /etc/hello"), "hello from the image\n");
    EXPECT_EQ(debugfs(image.rootfs, "cat /etc/shared"), "from the base\n");
    // The directory's sub-second mtime made it into the image (debugfs shows mtime_extra,
    // nanoseconds << 2, in hex after the seconds).
    char extra[16];
    std::snprintf(extra, sizeof extra, ":%08x", 123456789u << 2);
    EXPECT_NE(debugfs(image.rootfs, "stat /usr/share/fonts").find(extra), std::string::npos)
        << debugfs(image.rootfs, "stat /usr/share/fonts");
    std::ifstream in(image.dir / "build.json");
    auto record = nlohmann::json::parse(in);
    EXPECT_EQ(record["derived_from"], l.base_boot().string());
    EXPECT_GT(record["rootfs_image_seconds"].get<double>(), 0.0);
    EXPECT_FALSE(fs::exists(l.image() / ".microvm.tmp-dead"));

    // Nothing of the rootfs or the base was written.
    const auto fonts_after = stat_of(l.rootfs() / "usr" / "share" / "fonts");
    EXPECT_EQ(fonts_after.st_mtim.tv_nsec, fonts_before.st_mtim.tv_nsec);
    EXPECT_EQ(fonts_after.st_mtim.tv_sec, fonts_before.st_mtim.tv_sec);
    EXPECT_EQ(stat_of(l.rootfs() / "etc" / "shared").st_mtim.tv_sec, shared_before.st_mtim.tv_sec);
    EXPECT_EQ(stat_of(l.rootfs() / "etc" / "shared").st_nlink, 2u);

    // Once: a second start finds it.
    const auto made = stat_of(image.rootfs);
    EXPECT_EQ(stat_of(runtime.made_image_for(l.rootfs()).rootfs).st_ino, made.st_ino);
}

TEST(DerivedImage, WithoutABuiltBaseTheErrorSaysWhatToBuild) {
    Layout l;
    MicrovmRuntime runtime;
    try {
        runtime.check_template(l.rootfs());
        FAIL() << "no base has boot files";
    } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("build_microvm.py minimal"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(runtime.made_image_for(l.rootfs()), RuntimeError);
    EXPECT_FALSE(fs::exists(l.image() / "microvm"));
    fs::remove(l.image() / "bases.json");  // a shipped-style folder: its own image is missing
    try {
        runtime.check_template(l.rootfs());
        FAIL() << "no image";
    } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("is not built"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deskbox::runtime
