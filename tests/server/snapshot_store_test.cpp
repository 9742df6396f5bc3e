// What a named snapshot is made of, on the real kernel: copy_tree (a container's writable layer,
// with owners moved between sandboxes' id ranges, hard links, sparse files, whiteouts, links
// that point out and are never followed) and SnapshotStore (staged then committed by rename,
// one of two makers wins, half-made leftovers removed by the next store). Needs root (chown,
// mknod).
#include "server/snapshots/snapshot_store.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "common/temp_dir.hpp"
#include "server/runtime/runtime.hpp"
#include "server/runtime/tree_copy.hpp"

namespace deskbox {
namespace {

namespace fs = std::filesystem;
using runtime::IdShift;
using snapshots::SnapshotError;
using snapshots::SnapshotErrorKind;
using snapshots::SnapshotInfo;
using snapshots::SnapshotStore;

void write_file(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

struct stat lstat_of(const fs::path& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st;
}

class TreeCopyTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown, mknod)";
        fs::create_directories(from_);
        fs::create_directories(to_);
    }
    TempDir dir_{"deskbox-tree-copy"};
    fs::path from_ = dir_.path() / "from", to_ = dir_.path() / "to";
};

TEST(IdShiftTest, MovesTheGuestsRangeAndSendsOtherIdsToNobody) {
    IdShift shift{.from_base = 200000, .to_base = 300000};
    EXPECT_EQ(shift.map(200000), 300000u);
    EXPECT_EQ(shift.map(201000), 301000u);
    EXPECT_EQ(shift.map(200000 + 65535), 300000u + 65535);
    EXPECT_EQ(shift.map(0), 300000u + 65534) << "the host's root is not the guest's";
    EXPECT_EQ(shift.map(200000 + 65536), 300000u + 65534);
}

TEST_F(TreeCopyTest, CopiesALayerWholeWithOwnersMoved) {
    const std::uint32_t from_base = 200000, to_base = 300000;
    fs::create_directories(from_ / "home/user/deep");
    write_file(from_ / "home/user/note", "hello\n");
    ASSERT_EQ(::chown((from_ / "home/user/note").c_str(), from_base + 1000, from_base + 1000), 0);
    ASSERT_EQ(::chmod((from_ / "home/user/note").c_str(), 04750), 0);
    ASSERT_EQ(::chown((from_ / "home/user").c_str(), from_base + 1000, from_base + 1000), 0);
    // A hard link pair stays one file.
    write_file(from_ / "home/user/deep/a", "linked");
    ASSERT_EQ(::link((from_ / "home/user/deep/a").c_str(), (from_ / "home/user/b").c_str()), 0);
    // A sparse file keeps its holes: 64 MiB long, 4 KiB written.
    {
        int fd = ::open((from_ / "sparse").c_str(), O_CREAT | O_WRONLY, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::pwrite(fd, "end", 3, (64 << 20) - 3), 3);
        ::close(fd);
    }
    // Symlinks are copied as links, never followed: one points at the host's shadow file.
    fs::create_symlink("/etc/shadow", from_ / "home/user/shadow");
    fs::create_symlink("../../..", from_ / "home/user/up");
    // An overlay whiteout (a 0/0 character device) and an opaque directory's mark.
    ASSERT_EQ(::mknod((from_ / "deleted").c_str(), S_IFCHR | 0, ::makedev(0, 0)), 0);
    fs::create_directories(from_ / "opaque");
    ASSERT_EQ(::setxattr((from_ / "opaque").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
    // Overlay's own bookkeeping of the source mount is not copied to another mount.
    ASSERT_EQ(::setxattr((from_ / "opaque").c_str(), "trusted.overlay.origin", "xyz", 3, 0), 0);
    ASSERT_EQ(::mkfifo((from_ / "fifo").c_str(), 0600), 0);

    auto stats = runtime::copy_tree(from_, to_, {.from_base = from_base, .to_base = to_base});
    EXPECT_GE(stats.files, 10u);
    EXPECT_EQ(read_file(to_ / "home/user/note"), "hello\n");
    auto note = lstat_of(to_ / "home/user/note");
    EXPECT_EQ(note.st_uid, to_base + 1000);
    EXPECT_EQ(note.st_gid, to_base + 1000);
    EXPECT_EQ(note.st_mode & 07777, 04750u) << "setuid kept after the chown";
    EXPECT_EQ(lstat_of(to_ / "home/user").st_uid, to_base + 1000);
    EXPECT_EQ(lstat_of(to_ / "home/user/deep/a").st_ino, lstat_of(to_ / "home/user/b").st_ino);
    auto sparse = lstat_of(to_ / "sparse");
    EXPECT_EQ(sparse.st_size, 64 << 20);
    EXPECT_LT(sparse.st_blocks * 512, 1 << 20) << "holes stay holes";
    EXPECT_EQ(fs::read_symlink(to_ / "home/user/shadow"), "/etc/shadow");
    EXPECT_EQ(fs::read_symlink(to_ / "home/user/up"), "../../..");
    EXPECT_FALSE(fs::exists(to_ / "home/user/up/etc/shadow/..")) << "not followed";
    auto whiteout = lstat_of(to_ / "deleted");
    EXPECT_TRUE(S_ISCHR(whiteout.st_mode));
    EXPECT_EQ(whiteout.st_rdev, ::makedev(0, 0));
    char mark[4] = {};
    EXPECT_EQ(::getxattr((to_ / "opaque").c_str(), "trusted.overlay.opaque", mark, sizeof mark), 1);
    EXPECT_EQ(mark[0], 'y');
    EXPECT_LT(::getxattr((to_ / "opaque").c_str(), "trusted.overlay.origin", mark, sizeof mark), 0);
    EXPECT_TRUE(S_ISFIFO(lstat_of(to_ / "fifo").st_mode));
    // Files only the host could own inside the layer are the guest's nobody in the copy.
    EXPECT_EQ(lstat_of(to_ / "sparse").st_uid, to_base + 65534);
}

TEST_F(TreeCopyTest, ASocketIsLeftOutAndAMissingSourceIsAClearError) {
    const fs::path socket_path = from_ / "agent.sock";
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
    write_file(from_ / "kept", "x");
    runtime::copy_tree(from_, to_, {});
    EXPECT_TRUE(fs::exists(to_ / "kept"));
    EXPECT_FALSE(fs::exists(fs::symlink_status(to_ / "agent.sock")));
    try {
        runtime::copy_tree(dir_.path() / "absent", to_, {});
        ADD_FAILURE() << "copied a directory that does not exist";
    } catch (const runtime::RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
    }
}

SnapshotInfo info_of(const std::string& kind) {
    SnapshotInfo info;
    info.kind = kind;
    info.runtime = "container";
    info.template_name = "minimal";
    info.source_sandbox = "sb-0123456789ab";
    info.created_at = std::chrono::system_clock::now();
    info.metadata = {{"k", "v"}};
    info.settings = {{"resolution", {1280, 800}}, {"env", {{"SECRET", "s"}}}};
    return info;
}

SnapshotErrorKind kind_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const SnapshotError& e) {
        return e.kind();
    }
    ADD_FAILURE() << "no SnapshotError";
    return SnapshotErrorKind::failed;
}

TEST(SnapshotStoreTest, MadeByRenameListedAndRemoved) {
    TempDir dir("deskbox-snapshots");
    SnapshotStore store({.root = dir.path() / "snapshots"});
    EXPECT_TRUE(store.list().empty());
    {
        auto pending = store.begin("s1", 0);
        fs::create_directories(pending.copy_dir());
        write_file(pending.copy_dir() / "data", std::string(10000, 'x'));
        EXPECT_TRUE(store.list().empty()) << "not visible before commit";
        auto made = pending.commit(info_of("filesystem"));
        EXPECT_EQ(made.name, "s1");
        EXPECT_GE(made.size_bytes, 10000u);
    }
    auto listed = store.list();
    ASSERT_EQ(listed.size(), 1u);
    auto shown = listed[0].to_json();
    EXPECT_EQ(shown["name"], "s1");
    EXPECT_EQ(shown["metadata"]["k"], "v");
    EXPECT_EQ(shown["resolution"], nlohmann::json({1280, 800}));
    EXPECT_FALSE(shown.contains("env")) << "settings are not shown: " << shown.dump();
    EXPECT_FALSE(shown.contains("settings")) << shown.dump();
    EXPECT_EQ(read_file(store.copy_dir("s1") / "data").size(), 10000u);
    EXPECT_EQ(store.inspect("s1").settings["env"]["SECRET"], "s") << "the record keeps them";

    EXPECT_EQ(kind_of([&] { store.begin("s1", 0); }), SnapshotErrorKind::exists);
    for (const char* bad : {"", "../x", "A", "a/b", ".hidden", "x y"})
        EXPECT_EQ(kind_of([&] { store.begin(bad, 0); }), SnapshotErrorKind::invalid) << bad;
    EXPECT_EQ(kind_of([&] { store.inspect("nope"); }), SnapshotErrorKind::not_found);
    EXPECT_EQ(kind_of([&] { store.copy_dir("nope"); }), SnapshotErrorKind::not_found);
    EXPECT_EQ(kind_of([&] { store.remove("nope"); }), SnapshotErrorKind::not_found);
    EXPECT_EQ(kind_of([&] { store.begin("huge", std::uint64_t{1} << 62); }),
              SnapshotErrorKind::no_space);

    store.remove("s1");
    EXPECT_TRUE(store.list().empty());
    EXPECT_TRUE(fs::is_empty(dir.path() / "snapshots")) << "nothing left behind";
}

TEST(SnapshotStoreTest, ASnapshotAStartHoldsIsNotDeletedFromUnderIt) {
    TempDir dir("deskbox-snapshots");
    SnapshotStore store({.root = dir.path() / "snapshots"});
    store.begin("held", 0).commit(info_of("filesystem"));
    {
        auto first = store.use("held");
        auto second = store.use("held");
        EXPECT_EQ(first.copy_dir(), store.copy_dir("held"));
        EXPECT_EQ(kind_of([&] { store.remove("held"); }), SnapshotErrorKind::in_use);
        { auto moved = std::move(first); }
        EXPECT_EQ(kind_of([&] { store.remove("held"); }), SnapshotErrorKind::in_use)
            << "one start still holds it";
    }
    store.remove("held");
    EXPECT_EQ(kind_of([&] { store.use("held"); }), SnapshotErrorKind::not_found);
}

TEST(SnapshotStoreTest, OfTwoMakersOfOneNameTheFirstWinsAndTheOtherLeavesNothing) {
    TempDir dir("deskbox-snapshots");
    SnapshotStore store({.root = dir.path() / "snapshots"});
    auto first = store.begin("same", 0);
    auto second = store.begin("same", 0);
    fs::create_directories(first.copy_dir());
    fs::create_directories(second.copy_dir());
    write_file(first.copy_dir() / "who", "first");
    write_file(second.copy_dir() / "who", "second");
    first.commit(info_of("memory"));
    EXPECT_EQ(kind_of([&] { second.commit(info_of("memory")); }), SnapshotErrorKind::exists);
    EXPECT_EQ(read_file(store.copy_dir("same") / "who"), "first");
    { auto dropped = std::move(second); }
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path() / "snapshots"))
        ++entries;
    EXPECT_EQ(entries, 1u) << "the loser's staging is gone";
}

TEST(SnapshotStoreTest, ANewStoreRemovesWhatAKilledServerLeftHalfDone) {
    TempDir dir("deskbox-snapshots");
    const fs::path root = dir.path() / "snapshots";
    {
        SnapshotStore store({.root = root});
        store.begin("kept", 0).commit(info_of("filesystem"));
    }
    // What a SIGKILL leaves: a snapshot being made, one being deleted, a fork's source.
    for (const char* half : {".creating-x-0011", ".deleting-y-2233", ".fork-4455"}) {
        fs::create_directories(root / half / "copy");
        write_file(root / half / "copy" / "f", "data");
    }
    SnapshotStore restarted({.root = root});
    ASSERT_EQ(restarted.list().size(), 1u);
    EXPECT_EQ(restarted.list()[0].name, "kept");
    for (const char* half : {".creating-x-0011", ".deleting-y-2233", ".fork-4455"})
        EXPECT_FALSE(fs::exists(root / half)) << half;
    // An unnamed copy (a fork's source) cannot be committed and is removed when dropped.
    fs::path staging;
    {
        auto unnamed = restarted.begin_unnamed();
        staging = unnamed.copy_dir().parent_path();
        EXPECT_TRUE(fs::exists(staging));
    }
    EXPECT_FALSE(fs::exists(staging));
}

}  // namespace
}  // namespace deskbox
