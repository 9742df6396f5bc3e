// Volumes on the real kernel (loop devices, ext4, mounts): create, the one-writer rule, the
// hard size, data across unmounts and a new store (a restarted server), removal refused while
// mounted, and what a killed server leaves half made. Needs root.
#include "server/volumes/volume_store.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <optional>

#include "common/temp_dir.hpp"
#include "server/runtime/container/mounts.hpp"

namespace deskbox::volumes {
namespace {

namespace fs = std::filesystem;

class VolumeStoreTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root (loop devices, mounts)";
    }
    VolumeStore::Options options() const {
        VolumeStore::Options o;
        o.root = dir_.path() / "volumes";
        return o;
    }
    std::size_t mounts_under_root() const { return runtime::mounts_under(dir_.path()).size(); }
    TempDir dir_{"deskbox-volumes"};
};

VolumeErrorKind kind_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const VolumeError& e) {
        return e.kind();
    }
    ADD_FAILURE() << "no VolumeError";
    return VolumeErrorKind::failed;
}

TEST_F(VolumeStoreTest, CreatesListsInspectsAndRemoves) {
    VolumeStore store(options());
    auto info = store.create("data-1", 32, {{"team", "qa"}});
    EXPECT_EQ(info.name, "data-1");
    EXPECT_EQ(info.size_mb, 32u);
    EXPECT_GT(info.used_bytes, 0u);  // ext4's own metadata and journal
    EXPECT_LT(info.used_bytes, 32u << 20);
    EXPECT_EQ(info.labels["team"], "qa");
    EXPECT_TRUE(info.mounts.empty());
    store.create("data-2", 16);
    auto all = store.list();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].name, "data-1");
    EXPECT_EQ(all[1].name, "data-2");
    store.remove("data-1");
    EXPECT_EQ(kind_of([&] { store.inspect("data-1"); }), VolumeErrorKind::not_found);
    EXPECT_EQ(store.list().size(), 1u);
    EXPECT_EQ(mounts_under_root(), 0u);
}

TEST_F(VolumeStoreTest, RefusesBadNamesSizesAndDuplicates) {
    VolumeStore store(options());
    for (const char* name : {"", "Upper", ".hidden", "a/b", "with space", "-dash"})
        EXPECT_EQ(kind_of([&] { store.create(name, 32); }), VolumeErrorKind::invalid) << name;
    EXPECT_EQ(kind_of([&] { store.create("small", 1); }), VolumeErrorKind::invalid);
    EXPECT_EQ(kind_of([&] { store.create("huge", std::uint64_t{1} << 40); }),
              VolumeErrorKind::invalid);
    store.create("once", 16);
    EXPECT_EQ(kind_of([&] { store.create("once", 16); }), VolumeErrorKind::exists);
    EXPECT_EQ(kind_of([&] { store.remove("never"); }), VolumeErrorKind::not_found);
    EXPECT_EQ(kind_of([&] {
                  store.acquire("never", {"sb-1", "/data", false});
              }),
              VolumeErrorKind::not_found);
}

TEST_F(VolumeStoreTest, RefusesWhatTheHostDiskCannotHold) {
    VolumeStore::Options o = options();
    o.max_size_mb = std::uint64_t{1} << 32;
    VolumeStore store(o);
    auto error = [&] {
        try {
            store.create("too-big", std::uint64_t{1} << 31);  // 2 PiB
        } catch (const VolumeError& e) {
            return std::pair{e.kind(), std::string(e.what())};
        }
        return std::pair{VolumeErrorKind::failed, std::string("created")};
    }();
    EXPECT_EQ(error.first, VolumeErrorKind::no_space) << error.second;
    EXPECT_NE(error.second.find("MiB free"), std::string::npos) << error.second;
    EXPECT_TRUE(store.list().empty());
}

TEST_F(VolumeStoreTest, OneWriterAnyNumberOfReaders) {
    VolumeStore store(options());
    store.create("shared", 16);
    auto writer = store.acquire("shared", {"sb-w", "/data", false});
    EXPECT_EQ(kind_of([&] {
                  store.acquire("shared", {"sb-x", "/data", false});
              }),
              VolumeErrorKind::in_use);
    auto reader1 = store.acquire("shared", {"sb-r1", "/data", true});
    auto reader2 = store.acquire("shared", {"sb-r2", "/mnt/in", true});
    EXPECT_EQ(reader1.host_path(), writer.host_path());
    EXPECT_EQ(store.inspect("shared").mounts.size(), 3u);
    EXPECT_EQ(kind_of([&] { store.remove("shared"); }), VolumeErrorKind::in_use);
    writer.release();
    auto writer2 = store.acquire("shared", {"sb-x", "/data", false});  // the writer left
    EXPECT_EQ(mounts_under_root(), 1u);                                // one host mount
    writer2.release();
    reader1.release();
    reader2 = VolumeLease();  // moved-over leases release too
    EXPECT_EQ(mounts_under_root(), 0u);
    store.remove("shared");
}

TEST_F(VolumeStoreTest, DataSurvivesUnmountAndANewStoreAndTheSizeIsHard) {
    {
        VolumeStore store(options());
        store.create("keep", 16);
        auto lease = store.acquire("keep", {"sb-1", "/data", false});
        struct stat root {};
        ASSERT_EQ(::stat(lease.host_path().c_str(), &root), 0);
        EXPECT_EQ(root.st_uid, 1000u);  // the guest user owns the volume's root
        std::ofstream(lease.host_path() / "note.txt") << "kept across servers";
        // Writing past the size fails (ENOSPC) instead of filling the host.
        std::ofstream big(lease.host_path() / "big.bin", std::ios::binary);
        std::string chunk(1 << 20, 'x');
        int written = 0;
        for (; written < 64 && big.write(chunk.data(), chunk.size()) && big.flush(); ++written) {
        }
        EXPECT_LT(written, 16);
        big.close();
        fs::remove(lease.host_path() / "big.bin");
    }
    EXPECT_EQ(mounts_under_root(), 0u);
    VolumeStore again(options());  // the next server
    auto lease = again.acquire("keep", {"sb-2", "/data", true});
    std::ifstream in(lease.host_path() / "note.txt");
    std::string text;
    std::getline(in, text);
    EXPECT_EQ(text, "kept across servers");
}

TEST_F(VolumeStoreTest, AKilledServersHalfMadeAndHalfRemovedVolumesAreGone) {
    fs::create_directories(options().root / ".creating-half-1a2b" / "mnt");
    fs::create_directories(options().root / ".deleting-old-3c4d");
    std::ofstream(options().root / ".deleting-old-3c4d" / "data.ext4") << "x";
    VolumeStore store(options());
    EXPECT_TRUE(store.list().empty());
    EXPECT_FALSE(fs::exists(options().root / ".creating-half-1a2b"));
    EXPECT_FALSE(fs::exists(options().root / ".deleting-old-3c4d"));
}

TEST_F(VolumeStoreTest, ReleaseUnusedUnmountsWhatNoLeaseHolds) {
    std::optional<VolumeLease> kept;
    {
        VolumeStore store(options());
        store.create("left", 16);
        kept = store.acquire("left", {"sb-1", "/data", false});
    }
    // A server that exits leaving its sandbox running keeps the host mount: its lease can no
    // longer reach its store and lets go without unmounting.
    kept.reset();
    ASSERT_EQ(mounts_under_root(), 1u);
    VolumeStore next(options());
    auto adopted = next.acquire("left", {"sb-1", "/data", false});  // reuses the mount
    EXPECT_EQ(mounts_under_root(), 1u);
    next.release_unused();
    EXPECT_EQ(mounts_under_root(), 1u);  // a lease holds it
    adopted.release();
    EXPECT_EQ(mounts_under_root(), 0u);
    {
        VolumeStore store(options());
        kept = store.acquire("left", {"sb-2", "/data", false});
    }
    kept.reset();
    VolumeStore after(options());
    after.release_unused();  // nobody adopted sb-2
    EXPECT_EQ(mounts_under_root(), 0u);
}

// A microVM's disk use: the image alone, the volume nobody else's meanwhile, never mounted on
// the host; afterwards the host mounts it only when the server allows it, after e2fsck, and a
// filesystem e2fsck cannot mend is never mounted.
TEST_F(VolumeStoreTest, ADiskUseIsAloneAndTheHostMountsWhatAGuestWroteOnlyAfterE2fsck) {
    const fs::path image = dir_.path() / "volumes" / "vm-data" / "data.ext4";
    {
        VolumeStore store(options());
        store.create("vm-data", 32);
        auto reader = store.acquire("vm-data", {"sb-reader", "/data", true});
        EXPECT_EQ(kind_of([&] {
                      store.acquire("vm-data", {"sb-vm", "/data", false, true});
                  }),
                  VolumeErrorKind::in_use)
            << "a disk use waits for the host mount's users";
        reader.release();
        EXPECT_EQ(mounts_under_root(), 0u);

        auto disk = store.acquire("vm-data", {"sb-vm", "/data", false, true});
        EXPECT_EQ(disk.host_path(), image);
        EXPECT_EQ(mounts_under_root(), 0u) << "the host never mounts a guest's disk";
        for (bool read_only : {true, false})
            EXPECT_EQ(kind_of([&] {
                          store.acquire("vm-data", {"sb-c", "/data", read_only});
                      }),
                      VolumeErrorKind::in_use);
        EXPECT_EQ(kind_of([&] {
                      store.acquire("vm-data", {"sb-vm2", "/d", true, true});
                  }),
                  VolumeErrorKind::in_use);
        const auto info = store.inspect("vm-data");
        ASSERT_EQ(info.mounts.size(), 1u);
        EXPECT_TRUE(info.mounts[0].as_disk);
        EXPECT_EQ(info.to_json()["mounts"][0]["as_disk"], true);
        EXPECT_EQ(kind_of([&] { store.remove("vm-data"); }), VolumeErrorKind::in_use);
        disk.release();
        // By default the host never mounts it again; another disk use may have it.
        EXPECT_EQ(kind_of([&] {
                      store.acquire("vm-data", {"sb-c", "/data", true});
                  }),
                  VolumeErrorKind::guest_written);
        EXPECT_EQ(mounts_under_root(), 0u);
        store.acquire("vm-data", {"sb-vm3", "/data", false, true}).release();
    }
    {
        // Allowed: e2fsck first (a restarted server knows the volume from its marker file).
        auto allowing = options();
        allowing.mount_guest_written = true;
        VolumeStore store(allowing);
        auto lease = store.acquire("vm-data", {"sb-c", "/data", false});
        EXPECT_EQ(mounts_under_root(), 1u);
        lease.release();
        // A guest that wrecked its filesystem (zeroed, every backup superblock too): e2fsck
        // cannot mend it, so the host does not mount it.
        store.acquire("vm-data", {"sb-vm", "/data", false, true}).release();
        {
            std::fstream f(image, std::ios::in | std::ios::out | std::ios::binary);
            const std::string zeros(32 << 20, '\0');
            f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
        }
        EXPECT_EQ(kind_of([&] {
                      store.acquire("vm-data", {"sb-c", "/data", false});
                  }),
                  VolumeErrorKind::failed);
        EXPECT_EQ(mounts_under_root(), 0u);
        EXPECT_TRUE(store.inspect("vm-data").mounts.empty());
    }
}

}  // namespace
}  // namespace deskbox::volumes
