// Replays the VNC fuzz seed corpus (streaming/vnc/fuzz/corpus) through the fuzz target's own
// conversation and checks, so every build exercises them without clang, and checks that the
// handshake seeds really get through to ServerInit (so the seeds reach the client messages).
#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "tests/support/corpus_replay.hpp"
#include "tests/support/test_paths.hpp"

// Defined in streaming/vnc/fuzz/vnc_handshake_fuzz.cpp, compiled into this test.
namespace deskbox::streaming::vnc_fuzz {
std::string converse(std::string_view client_bytes);
void check_still_serving();
}  // namespace deskbox::streaming::vnc_fuzz

namespace deskbox::streaming {
namespace {

namespace fs = std::filesystem;

constexpr int kScreenWidth = 64;  // the fuzz target's fake screen
constexpr int kScreenHeight = 48;

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string seed(const std::string& name) {
    std::string bytes =
        read_file(fs::path(deskbox::test_paths::source("streaming/vnc/fuzz/corpus")) / name);
    if (bytes.empty()) throw std::runtime_error("no seed " + name);
    return bytes;
}

std::uint32_t be32(const std::string& bytes, std::size_t at) {
    std::uint32_t value = 0;
    std::memcpy(&value, bytes.data() + at, 4);
    return ntohl(value);
}

int be16(const std::string& bytes, std::size_t at) {
    return static_cast<unsigned char>(bytes[at]) << 8 | static_cast<unsigned char>(bytes[at + 1]);
}

// What the server sent up to and with ServerInit, given where its SecurityResult is.
void expect_server_init(const std::string& rx, std::size_t result_at) {
    ASSERT_GE(rx.size(), result_at + 4 + 24);
    EXPECT_EQ(be32(rx, result_at), 0u) << "SecurityResult: not OK";
    std::size_t init = result_at + 4;
    EXPECT_EQ(be16(rx, init), kScreenWidth);
    EXPECT_EQ(be16(rx, init + 2), kScreenHeight);
    EXPECT_EQ(static_cast<unsigned char>(rx[init + 4]), 32);  // bits per pixel
    std::uint32_t name_length = be32(rx, init + 20);
    ASSERT_GE(rx.size(), init + 24 + name_length);
    EXPECT_EQ(rx.substr(init + 24, name_length), "deskbox-fuzz");
}

TEST(VncCorpus, EverySeedPassesTheFuzzChecks) {
    EXPECT_GE(test::replay_corpus(deskbox::test_paths::source("streaming/vnc/fuzz/corpus")), 15u);
    vnc_fuzz::check_still_serving();  // aborts if the seeds left the server unable to serve
}

TEST(VncCorpus, FullHandshakeSeedGetsServerInitWithTheScreenSize) {
    std::string rx = vnc_fuzz::converse(seed("handshake-38-control.bin"));
    ASSERT_GE(rx.size(), 14u);
    EXPECT_EQ(rx.substr(0, 12), "RFB 003.008\n");
    ASSERT_EQ(rx[12], 1) << "one security type";
    EXPECT_EQ(rx[13], 2) << "VNC authentication";
    expect_server_init(rx, 14 + 16);  // after the challenge
}

TEST(VncCorpus, OtherHandshakeSeedsLogInToo) {
    // RFB 3.3: the server names the security type (u32), then the challenge.
    std::string rx = vnc_fuzz::converse(seed("handshake-33-control.bin"));
    ASSERT_GE(rx.size(), 16u);
    EXPECT_EQ(be32(rx, 12), 2u);
    expect_server_init(rx, 16 + 16);

    rx = vnc_fuzz::converse(seed("handshake-38-view-only.bin"));
    expect_server_init(rx, 14 + 16);
}

TEST(VncCorpus, WrongPasswordSeedIsRefused) {
    std::string rx = vnc_fuzz::converse(seed("bad-wrong-password.bin"));
    ASSERT_GE(rx.size(), 14u + 16 + 4);
    EXPECT_EQ(be32(rx, 30), 1u) << "SecurityResult: failed";
}

}  // namespace
}  // namespace deskbox::streaming
