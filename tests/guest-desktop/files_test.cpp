// FileService on the real file system, in a temp dir per test.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/temp_dir.hpp"
#include "guest-desktop/services/file_service.hpp"

namespace deskbox::services {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class FilesTest : public ::testing::Test {
  protected:
    std::string path(const std::string& name) const { return (dir_.path() / name).string(); }
    static std::string slurp(const std::string& p) {
        std::ifstream in(p, std::ios::binary);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    }
    static void put(const std::string& p, const std::string& data) {
        std::ofstream(p, std::ios::binary) << data;
    }
    TempDir dir_{"deskbox-files-test"};
    FileService files_;
};

// Runs `fn` and returns the ServiceError it throws (fails the test if it does not throw).
template <typename Fn>
ServiceError error_of(Fn fn) {
    try {
        fn();
    } catch (const ServiceError& e) {
        return e;
    }
    ADD_FAILURE() << "no ServiceError thrown";
    return ServiceError("none", "none");
}

TEST_F(FilesTest, AllByteValuesRoundTrip) {
    std::string bytes;
    for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
    json w = files_.write({{"path", path("bytes.bin")}}, bytes);
    EXPECT_EQ(w["size"], 256);
    EXPECT_EQ(slurp(path("bytes.bin")), bytes);
    Reply r = files_.read({{"path", path("bytes.bin")}});
    EXPECT_EQ(r.body, bytes);
    EXPECT_EQ(r.result["size"], 256);
    EXPECT_EQ(r.result["mode"], 0644);
}

TEST_F(FilesTest, MultiMegabyteRandomFileRoundTrips) {
    std::mt19937_64 rng(42);
    std::string data(5 * 1024 * 1024 + 17, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    files_.write({{"path", path("random.bin")}, {"mode", "0600"}}, data);
    struct stat st {};
    ASSERT_EQ(::stat(path("random.bin").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    Reply r = files_.read({{"path", path("random.bin")}});
    EXPECT_EQ(r.body.size(), data.size());
    EXPECT_TRUE(r.body == data);
    EXPECT_EQ(r.result["mode"], 0600);
}

TEST_F(FilesTest, ReplaceIsAtomicKeepsModeAndLeavesNoTempFiles) {
    put(path("f.txt"), "old contents that are longer");
    ::chmod(path("f.txt").c_str(), 0640);
    struct stat old {};
    ASSERT_EQ(::stat(path("f.txt").c_str(), &old), 0);
    files_.write({{"path", path("f.txt")}}, "new");
    EXPECT_EQ(slurp(path("f.txt")), "new");
    struct stat st {};
    ASSERT_EQ(::stat(path("f.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    // A rename put a new inode in place (an in-place rewrite would keep the old one).
    EXPECT_NE(st.st_ino, old.st_ino);
    int entries = 0;
    for ([[maybe_unused]] auto& e : fs::directory_iterator(dir_.path())) ++entries;
    EXPECT_EQ(entries, 1);
}

TEST_F(FilesTest, AppendAddsToTheEnd) {
    files_.write({{"path", path("log")}}, "one\n");
    json r = files_.write({{"path", path("log")}, {"append", true}}, "two\n");
    EXPECT_EQ(r["size"], 8);
    EXPECT_EQ(slurp(path("log")), "one\ntwo\n");
    files_.write({{"path", path("fresh")}, {"append", true}}, "x");
    EXPECT_EQ(slurp(path("fresh")), "x");
}

TEST_F(FilesTest, ParentsCreatesMissingDirectories) {
    std::string deep = path("a/b/c/file.txt");
    ServiceError e = error_of([&] { files_.write({{"path", deep}}, "x"); });
    EXPECT_EQ(e.code(), "not_found");
    EXPECT_EQ(e.field(), "path");
    files_.write({{"path", deep}, {"parents", true}}, "deep");
    EXPECT_EQ(slurp(deep), "deep");
}

TEST_F(FilesTest, WritesThroughASymlink) {
    put(path("target"), "t");
    fs::create_symlink(path("target"), path("link"));
    files_.write({{"path", path("link")}}, "via link");
    EXPECT_TRUE(fs::is_symlink(path("link")));
    EXPECT_EQ(slurp(path("target")), "via link");
}

TEST_F(FilesTest, PathsMustBeAbsoluteStringsWithoutNul) {
    ServiceError e = error_of([&] { files_.read({{"path", "relative/file"}}); });
    EXPECT_EQ(e.code(), "bad_request");
    EXPECT_EQ(e.field(), "path");
    e = error_of([&] { files_.read({{"path", 5}}); });
    EXPECT_EQ(e.field(), "path");
    e = error_of([&] { files_.read(json::object()); });
    EXPECT_EQ(e.field(), "path");
    e = error_of([&] { files_.read({{"path", std::string("/tmp/a\0b", 8)}}); });
    EXPECT_EQ(e.field(), "path");
    e = error_of([&] { files_.read({{"path", "/tmp/x"}, {"pth", 1}}); });
    EXPECT_EQ(e.field(), "pth");
    e = error_of([&] { files_.write({{"path", path("m")}, {"mode", "999"}}, ""); });
    EXPECT_EQ(e.field(), "mode");
    e = error_of([&] { files_.write({{"path", path("m")}, {"mode", 070000}}, ""); });
    EXPECT_EQ(e.field(), "mode");
    EXPECT_FALSE(fs::exists(path("m")));
}

TEST_F(FilesTest, ErrorsCarryCodesAndThePath) {
    ServiceError e = error_of([&] { files_.read({{"path", path("missing")}}); });
    EXPECT_EQ(e.code(), "not_found");
    EXPECT_NE(e.message().find(path("missing")), std::string::npos);

    e = error_of([&] { files_.read({{"path", dir_.path().string()}}); });
    EXPECT_EQ(e.code(), "is_a_directory");
    e = error_of([&] { files_.write({{"path", dir_.path().string()}}, "x"); });
    EXPECT_EQ(e.code(), "is_a_directory");

    put(path("plain"), "p");
    e = error_of([&] { files_.read({{"path", path("plain") + "/child"}}); });
    EXPECT_EQ(e.code(), "not_a_directory");
    e = error_of([&] { files_.list({{"path", path("plain")}}); });
    EXPECT_EQ(e.code(), "not_a_directory");

    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
    e = error_of([&] { files_.read({{"path", path("fifo")}}); });  // must not hang
    EXPECT_EQ(e.code(), "bad_request");
}

TEST_F(FilesTest, PermissionDenied) {
    if (::geteuid() == 0) {
        // Root ignores file modes, but nobody may create files in sysfs.
        ServiceError e = error_of([&] { files_.write({{"path", "/sys/deskbox-test"}}, "x"); });
        EXPECT_EQ(e.code(), "permission_denied") << e.message();
        return;
    }
    put(path("secret"), "s");
    ::chmod(path("secret").c_str(), 0);
    ServiceError e = error_of([&] { files_.read({{"path", path("secret")}}); });
    EXPECT_EQ(e.code(), "permission_denied");
}

TEST_F(FilesTest, SizeLimits) {
    FileService small(FileLimits{.max_read_bytes = 10, .max_write_bytes = 10});
    put(path("eleven"), "01234567890");
    ServiceError e = error_of([&] { small.read({{"path", path("eleven")}}); });
    EXPECT_EQ(e.code(), "too_large");
    e = error_of([&] { small.write({{"path", path("w")}}, "01234567890"); });
    EXPECT_EQ(e.code(), "too_large");
    EXPECT_FALSE(fs::exists(path("w")));
    // procfs files report size 0: the limit must hold while reading, too.
    e = error_of([&] { small.read({{"path", "/proc/self/status"}}); });
    EXPECT_EQ(e.code(), "too_large");
    EXPECT_FALSE(files_.read({{"path", "/proc/self/status"}}).body.empty());
}

TEST_F(FilesTest, ListDescribesEntriesSortedByName) {
    put(path("b.txt"), "12345");
    fs::create_directory(path("a-dir"));
    fs::create_symlink("b.txt", path("c-link"));
    ::chmod(path("b.txt").c_str(), 0604);
    json r = files_.list({{"path", dir_.path().string()}});
    const json& entries = r["entries"];
    ASSERT_EQ(entries.size(), 3u);
    EXPECT_EQ(entries[0]["name"], "a-dir");
    EXPECT_EQ(entries[0]["type"], "dir");
    EXPECT_EQ(entries[1]["name"], "b.txt");
    EXPECT_EQ(entries[1]["type"], "file");
    EXPECT_EQ(entries[1]["size"], 5);
    EXPECT_EQ(entries[1]["mode"], 0604);
    EXPECT_GT(entries[1]["mtime"].get<double>(), 1.6e9);
    EXPECT_EQ(entries[2]["name"], "c-link");
    EXPECT_EQ(entries[2]["type"], "symlink");
    EXPECT_EQ(entries[2]["target"], "b.txt");
    EXPECT_FALSE(r.contains("truncated"));

    FileService few(FileLimits{.max_list_entries = 2});
    json t = few.list({{"path", dir_.path().string()}});
    EXPECT_EQ(t["entries"].size(), 2u);
    EXPECT_EQ(t["truncated"], true);
}

TEST_F(FilesTest, MkdirRemoveAndStat) {
    files_.mkdir({{"path", path("d")}});
    EXPECT_TRUE(fs::is_directory(path("d")));
    ServiceError e = error_of([&] { files_.mkdir({{"path", path("d")}}); });
    EXPECT_EQ(e.code(), "already_exists");
    files_.mkdir({{"path", path("d")}, {"parents", true}});  // mkdir -p: fine
    e = error_of([&] { files_.mkdir({{"path", path("x/y")}}); });
    EXPECT_EQ(e.code(), "not_found");
    files_.mkdir({{"path", path("x/y")}, {"parents", true}, {"mode", 0700}});
    EXPECT_EQ(files_.stat({{"path", path("x/y")}})["mode"], 0700);
    EXPECT_EQ(files_.stat({{"path", path("x/y")}})["type"], "dir");

    put(path("d/inner"), "i");
    e = error_of([&] { files_.remove({{"path", path("d")}}); });
    EXPECT_EQ(e.code(), "not_empty");
    files_.remove({{"path", path("d")}, {"recursive", true}});
    EXPECT_FALSE(fs::exists(path("d")));

    // Removing a symlink to a directory removes the link only.
    fs::create_symlink(path("x"), path("xlink"));
    EXPECT_EQ(files_.stat({{"path", path("xlink")}})["type"], "symlink");
    files_.remove({{"path", path("xlink")}, {"recursive", true}});
    EXPECT_TRUE(fs::is_directory(path("x/y")));

    e = error_of([&] { files_.remove({{"path", path("gone")}}); });
    EXPECT_EQ(e.code(), "not_found");
    e = error_of([&] { files_.remove({{"path", "/"}, {"recursive", true}}); });
    EXPECT_EQ(e.code(), "bad_request");
    e = error_of([&] { files_.stat({{"path", path("gone")}}); });
    EXPECT_EQ(e.code(), "not_found");
}

}  // namespace
}  // namespace deskbox::services
