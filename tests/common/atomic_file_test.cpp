#include "common/atomic_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "common/temp_dir.hpp"

namespace deskbox {
namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

std::size_t entries_in(const std::filesystem::path& dir) {
    std::size_t count = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++count;
    return count;
}

TEST(AtomicFile, WritesTheBytesWithExactlyTheModeAskedFor) {
    TempDir dir;
    auto path = dir.path() / "record.json";
    const mode_t old_umask = ::umask(077);
    atomic_file::write(path, std::string("a\0b", 3), {.mode = 0644});
    ::umask(old_umask);
    EXPECT_EQ(read_file(path), std::string("a\0b", 3));
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0644u);   // not narrowed by the umask
    EXPECT_EQ(entries_in(dir.path()), 1u);  // no temporary left beside it
}

TEST(AtomicFile, AReaderOfTheOldFileKeepsTheOldContents) {
    TempDir dir;
    auto path = dir.path() / "state";
    atomic_file::write(path, "old contents");
    std::ifstream reader(path);  // opened before the replace
    atomic_file::write(path, "new", {.durability = atomic_file::Durability::power_loss});
    std::string seen((std::istreambuf_iterator<char>(reader)), std::istreambuf_iterator<char>());
    EXPECT_EQ(seen, "old contents");
    EXPECT_EQ(read_file(path), "new");
    EXPECT_EQ(entries_in(dir.path()), 1u);
}

TEST(AtomicFile, AFailedReplaceNamesThePathAndLeavesNoTemporary) {
    TempDir dir;
    auto target = dir.path() / "occupied";
    std::filesystem::create_directories(target / "child");  // rename cannot replace it
    try {
        atomic_file::write(target, "x");
        FAIL() << "replacing a non-empty directory succeeded";
    } catch (const std::system_error& e) {
        EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos) << e.what();
    }
    EXPECT_EQ(entries_in(dir.path()), 1u);  // only the directory; the temporary is gone
    EXPECT_TRUE(std::filesystem::is_directory(target / "child"));

    try {
        atomic_file::write(dir.path() / "missing" / "file", "x");
        FAIL() << "writing into a missing directory succeeded";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), ENOENT);
        EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
    }
}

TEST(AtomicFile, SyncWithDirectoryNamesAFileThatIsNotThere) {
    TempDir dir;
    atomic_file::write(dir.path() / "present", "x");
    EXPECT_NO_THROW(atomic_file::sync_with_directory(dir.path() / "present"));
    EXPECT_THROW(atomic_file::sync_with_directory(dir.path() / "absent"), std::system_error);
}

}  // namespace
}  // namespace deskbox
