// A store image as a byte stream between nodes (server/templates/template_transfer.cpp): a
// rootfs comes through whole (links, hard links, owners, modes, xattrs), and a stream cut
// short, changed on the way, or naming a path outside the root is refused and leaves nothing.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "common/temp_dir.hpp"
#include "server/templates/template_transfer.hpp"

namespace fs = std::filesystem;
using namespace deskbox::templates;
using nlohmann::json;

namespace {

const std::string kImage = std::string(64, 'a');

void write_file(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

StoredTemplate record_of(const std::string& image) {
    StoredTemplate t;
    t.ref = {"app", "v1"};
    t.image_id = image;
    t.definition = {{"env", {{"GREETING", "hi"}}}};
    t.base = "deskbox/minimal";
    return t;
}

// A source that hands out `bytes` in pieces of `piece`.
ByteSource source_of(const std::string& bytes, std::size_t piece = 7000) {
    auto offset = std::make_shared<std::size_t>(0);
    return [&bytes, offset, piece](char* buffer, std::size_t capacity) {
        const std::size_t n = std::min({piece, capacity, bytes.size() - *offset});
        std::memcpy(buffer, bytes.data() + *offset, n);
        *offset += n;
        return n;
    };
}

std::string be32(std::uint32_t n) {
    return {char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
}

// A well-framed stream around any tar bytes (a hostile sender's: the digest is right).
std::string frame(const std::string& tar, const std::string& image = kImage) {
    const std::string record = record_of(image).to_json().dump();
    std::string out = std::string(kImageStreamMagic) + be32(record.size()) + record;
    for (std::size_t at = 0; at < tar.size(); at += 4096) {
        const std::string chunk = tar.substr(at, 4096);
        out += be32(chunk.size()) + chunk;
    }
    out += be32(0);
    Sha256 hash;
    hash.add(out);
    return out + hash.digest();
}

// One ustar member header (a regular file, or `type`), its checksum right.
std::string tar_header(const std::string& name, std::size_t size, char type = '0',
                       const std::string& link = "") {
    std::string block(512, '\0');
    name.copy(block.data(), std::min<std::size_t>(name.size(), 100));
    std::snprintf(block.data() + 100, 8, "%07o", 0644);
    std::snprintf(block.data() + 108, 8, "%07o", 0);
    std::snprintf(block.data() + 116, 8, "%07o", 0);
    std::snprintf(block.data() + 124, 12, "%011zo", size);
    std::snprintf(block.data() + 136, 12, "%011o", 0);
    block[156] = type;
    link.copy(block.data() + 157, std::min<std::size_t>(link.size(), 100));
    std::memcpy(block.data() + 257,
                "ustar\0"
                "00",
                8);
    std::memset(block.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : block) sum += c;
    std::snprintf(block.data() + 148, 8, "%06o", sum);
    return block;
}

std::string tar_member(const std::string& name, const std::string& data, char type = '0',
                       const std::string& link = "") {
    std::string padded = data;
    padded.resize((data.size() + 511) / 512 * 512, '\0');
    return tar_header(name, data.size(), type, link) + padded;
}

std::string pax_record(const std::string& key, const std::string& value) {
    std::string body = " " + key + "=" + value + "\n";
    std::size_t length = body.size() + 1;
    while (std::to_string(length).size() + body.size() != length) ++length;
    return std::to_string(length) + body;
}

const std::string kEnd(1024, '\0');

class ImageTransfer : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "keeping owners needs root";
    }
    // Nothing of a refused stream is left: no image folder, no scratch folder, no record.
    void expect_nothing_left() {
        std::size_t entries = 0;
        for (const auto& e : fs::directory_iterator(store_dir.path() / "images")) {
            ADD_FAILURE() << "left behind: " << e.path();
            ++entries;
        }
        EXPECT_EQ(entries, 0u);
        EXPECT_FALSE(store.find({"app", "v1"}));
    }
    deskbox::TempDir source_dir{"image-source"};
    deskbox::TempDir store_dir{"image-store"};
    TemplateStore store{store_dir.path()};
};

}  // namespace

TEST_F(ImageTransfer, ARootfsComesThroughWhole) {
    const fs::path root = source_dir.path() / "rootfs";
    write_file(root / "etc/greeting", "hello from the build\n");
    write_file(root / "usr/bin/tool", std::string(3 << 20, 'x'));  // several chunks
    ASSERT_EQ(::chmod((root / "usr/bin/tool").c_str(), 04755), 0);
    ASSERT_EQ(::chown((root / "etc/greeting").c_str(), 1234, 5678), 0);
    fs::create_symlink("/etc/passwd", root / "etc/link-out");  // a link, never followed
    fs::create_hard_link(root / "etc/greeting", root / "etc/same");
    fs::create_directories(root / "empty");
    const bool xattrs =
        ::setxattr((root / "etc/greeting").c_str(), "trusted.deskbox", "v", 1, 0) == 0;

    std::string stream;
    write_image_stream(record_of(kImage), root, [&](std::string_view b) { stream.append(b); });
    const auto installed = install_image_stream(store, {"app", "v1"}, kImage, source_of(stream));
    EXPECT_EQ(installed.image_id, kImage);
    EXPECT_EQ(installed.definition["env"]["GREETING"], "hi");

    const fs::path got = store.rootfs_of(kImage);
    EXPECT_EQ(read_file(got / "etc/greeting"), "hello from the build\n");
    EXPECT_EQ(read_file(got / "usr/bin/tool"), std::string(3 << 20, 'x'));
    struct stat st {
    }, same{};
    ASSERT_EQ(::lstat((got / "usr/bin/tool").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 04755u);
    ASSERT_EQ(::lstat((got / "etc/greeting").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1234u);
    EXPECT_EQ(st.st_gid, 5678u);
    ASSERT_EQ(::lstat((got / "etc/same").c_str(), &same), 0);
    EXPECT_EQ(st.st_ino, same.st_ino) << "a hard link stays one";
    EXPECT_EQ(fs::read_symlink(got / "etc/link-out"), "/etc/passwd");
    EXPECT_TRUE(fs::is_directory(got / "empty"));
    if (xattrs) {
        char value[8] = {};
        EXPECT_EQ(::getxattr((got / "etc/greeting").c_str(), "trusted.deskbox", value, 8), 1);
        EXPECT_STREQ(value, "v");
    }
    auto found = store.find({"app", "v1"});
    ASSERT_TRUE(found);
    EXPECT_EQ(found->image_id, kImage);
    for (const auto& e : fs::directory_iterator(store_dir.path() / "images"))
        EXPECT_EQ(e.path().filename(), kImage) << "only the image: no scratch left";
}

TEST_F(ImageTransfer, CutOrChangedStreamsAreRefusedAndLeaveNothing) {
    const fs::path root = source_dir.path() / "rootfs";
    write_file(root / "etc/data", std::string(200000, 'd'));
    std::string stream;
    write_image_stream(record_of(kImage), root, [&](std::string_view b) { stream.append(b); });

    for (std::size_t cut : {stream.size() - 1, stream.size() - 33, stream.size() / 2,
                            std::size_t(100), std::size_t(5)}) {
        const std::string cut_short = stream.substr(0, cut);
        EXPECT_THROW(install_image_stream(store, {"app", "v1"}, kImage, source_of(cut_short)),
                     TransferError)
            << "cut at " << cut;
        expect_nothing_left();
    }
    std::string changed = stream;
    changed[changed.size() / 2] ^= 0x01;  // inside the file's data: only the digest shows it
    try {
        install_image_stream(store, {"app", "v1"}, kImage, source_of(changed));
        ADD_FAILURE() << "a changed stream was installed";
    } catch (const TransferError& e) {
        EXPECT_NE(std::string(e.what()).find("SHA-256"), std::string::npos) << e.what();
    }
    expect_nothing_left();
    EXPECT_THROW(install_image_stream(store, {"app", "v1"}, kImage, source_of(stream + "x")),
                 TransferError);
    expect_nothing_left();
    // The stream must be of the image asked for.
    EXPECT_THROW(
        install_image_stream(store, {"app", "v1"}, std::string(64, 'b'), source_of(stream)),
        TransferError);
    expect_nothing_left();
}

TEST_F(ImageTransfer, NamesLeadingOutOfTheRootAreRefused) {
    const fs::path outside = store_dir.path() / "images" / "escaped";
    const std::vector<std::pair<std::string, std::string>> hostile = {
        {"dot-dot", tar_member("./", "", '5') + tar_member("../../escaped", "owned") + kEnd},
        {"absolute", tar_member("/tmp/escaped", "owned") + kEnd},
        {"hard link out", tar_member("etc", "", '5') +
                              tar_member("etc/shadow", "", '1', "../../../etc/shadow") + kEnd},
        {"pax path", tar_member("PaxHeaders/x", pax_record("path", "a/../../escaped"), 'x') +
                         tar_member("harmless", "owned") + kEnd},
    };
    for (const auto& [what, tar] : hostile) {
        try {
            install_image_stream(store, {"app", "v1"}, kImage, source_of(frame(tar)));
            ADD_FAILURE() << what << ": installed";
        } catch (const TransferError& e) {
            EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos)
                << what << ": " << e.what();
        }
        EXPECT_FALSE(fs::exists(outside)) << what;
        EXPECT_FALSE(fs::exists("/tmp/escaped")) << what;
        expect_nothing_left();
    }
    // The same framing around a harmless archive goes in: the refusals were the names.
    EXPECT_NO_THROW(install_image_stream(
        store, {"app", "v1"}, kImage,
        source_of(frame(tar_member("./", "", '5') + tar_member("ok", "fine") + kEnd))));
    EXPECT_EQ(read_file(store.rootfs_of(kImage) / "ok"), "fine");
}

TEST(TarPathGuard, FollowsHeadersAcrossAnySplit) {
    const std::string tar =
        tar_member("a", std::string(1000, 'a')) +
        tar_member("PaxHeaders/b", pax_record("path", "deep/" + std::string(150, 'b')), 'x') +
        tar_member("b", "bb") + tar_member("x/../../y", "") + kEnd;
    for (std::size_t piece : {1, 511, 512, 513, 4096}) {
        TarPathGuard guard;
        std::string error;
        try {
            for (std::size_t at = 0; at < tar.size(); at += piece)
                guard.feed(std::string_view(tar).substr(at, piece));
        } catch (const TransferError& e) {
            error = e.what();
        }
        EXPECT_NE(error.find("x/../../y"), std::string::npos) << piece << ": " << error;
    }
    EXPECT_EQ(unsafe_member_name("./usr/bin"), "");
    EXPECT_EQ(unsafe_member_name("a..b/..c"), "");
    EXPECT_NE(unsafe_member_name(".."), "");
    EXPECT_NE(unsafe_member_name("/"), "");
}
