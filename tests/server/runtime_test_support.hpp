// Shared by the runtime tests and the runtime benchmark: a root filesystem to boot (the
// template from DESKBOX_TEST_ROOTFS, else a tiny busybox one built on the spot, no network),
// an agent dir holding the static test helper, and small polling helpers.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "tests/support/eventually.hpp"

namespace deskbox::testing {

namespace fs = std::filesystem;

// A minimal root filesystem: busybox-static, its applets as symlinks, and a `user` 1000
// with a home, like the real template has.
inline void build_busybox_rootfs(const fs::path& root) {
    const fs::path busybox = "/bin/busybox";
    if (!fs::exists(busybox))
        throw std::runtime_error(
            "no template rootfs: set DESKBOX_TEST_ROOTFS or install busybox-static");
    for (const char* dir :
         {"bin", "etc", "home", "tmp", "proc", "sys", "dev", "run", "opt", "root"})
        fs::create_directories(root / dir);
    fs::copy_file(busybox, root / "bin/busybox", fs::copy_options::overwrite_existing);
    auto list = run_process({busybox.string(), "--list"});
    std::istringstream applets(list.out);
    std::string applet;
    while (applets >> applet)
        if (applet != "busybox" && !fs::exists(root / "bin" / applet))
            fs::create_symlink("busybox", root / "bin" / applet);
    std::ofstream(root / "etc/passwd") << "root:x:0:0:root:/root:/bin/sh\n"
                                       << "user:x:1000:1000:user:/home/user:/bin/sh\n";
    std::ofstream(root / "etc/group") << "root:x:0:\nuser:x:1000:\n";
    fs::create_directories(root / "home/user");
    if (::chown((root / "home/user").c_str(), 1000, 1000) != 0)
        throw std::runtime_error("chown home/user failed");
    ::chmod(root.c_str(), 0755);
    ::chmod((root / "tmp").c_str(), 01777);
}

// The rootfs for this test process: DESKBOX_TEST_ROOTFS, or a busybox one kept until exit.
class TestRootfs {
  public:
    TestRootfs() {
        if (const char* env = std::getenv("DESKBOX_TEST_ROOTFS"); env && *env) {
            path_ = env;
            return;
        }
        dir_.emplace("deskbox-rootfs");
        ::chmod(dir_->path().c_str(), 0755);
        path_ = dir_->path() / "rootfs";
        build_busybox_rootfs(path_);
    }
    const fs::path& path() const { return path_; }
    bool is_busybox() const { return dir_.has_value(); }

  private:
    std::optional<TempDir> dir_;
    fs::path path_;
};

// A host dir shaped like the agent build: bin/runtime_test_helper, readable by uid 1000.
class TestAgentDir {
  public:
    explicit TestAgentDir(const fs::path& helper) : dir_("deskbox-agent") {
        fs::create_directories(dir_.path() / "bin");
        fs::copy_file(helper, dir_.path() / "bin/runtime_test_helper");
        ::chmod(dir_.path().c_str(), 0755);
        ::chmod((dir_.path() / "bin").c_str(), 0755);
        ::chmod((dir_.path() / "bin/runtime_test_helper").c_str(), 0755);
    }
    const fs::path& path() const { return dir_.path(); }

  private:
    TempDir dir_;
};

inline std::optional<std::string> read_file(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

using test::eventually;

}  // namespace deskbox::testing
