// Replays the fuzz seed corpus (protocol/fuzz/corpus) through the fuzz target's own checks, so
// CI exercises it without clang, and checks each file's expected outcome from its name.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "protocol/fuzz/fuzz_limits.hpp"
#include "protocol/message.hpp"
#include "tests/support/test_paths.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace deskbox::protocol {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Decodes a corpus input (byte 0 is the fuzzer's split seed); returns the error, or "".
std::string decode_error(std::string_view input, std::size_t& messages) {
    FrameDecoder decoder(fuzz::kFuzzLimits);
    messages = 0;
    try {
        decoder.feed(input.substr(1));
        while (decoder.next()) ++messages;
        decoder.finish();
    } catch (const ProtocolError& e) {
        return e.what();
    }
    return "";
}

TEST(ProtocolCorpus, EverySeedPassesTheFuzzChecksWithItsExpectedOutcome) {
    const fs::path dir = deskbox::test_paths::source("protocol/fuzz/corpus");
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    int valid = 0, invalid = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        SCOPED_TRACE(name);
        const std::string input = read_file(entry.path());
        ASSERT_FALSE(input.empty());
        LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
        std::size_t messages = 0;
        const std::string error = decode_error(input, messages);
        if (name.starts_with("valid-")) {
            EXPECT_EQ(error, "");
            ++valid;
        } else if (name.starts_with("invalid-")) {
            EXPECT_NE(error, "");
            ++invalid;
        }
    }
    EXPECT_GE(valid, 5);
    EXPECT_GE(invalid, 10);
}

TEST(ProtocolCorpus, SeedsDecodeToTheExpectedMessages) {
    const fs::path dir = deskbox::test_paths::source("protocol/fuzz/corpus");
    std::size_t messages = 0;
    EXPECT_EQ(decode_error(read_file(dir / "valid-all-kinds.bin"), messages), "");
    EXPECT_EQ(messages, 6u);
    EXPECT_NE(decode_error(read_file(dir / "invalid-after-valid.bin"), messages)
                  .find("unknown message kind 200"),
              std::string::npos);
    EXPECT_EQ(messages, 1u);
    EXPECT_NE(decode_error(read_file(dir / "invalid-truncated-body.bin"), messages)
                  .find("truncated frame"),
              std::string::npos);
    EXPECT_EQ(messages, 1u);
}

}  // namespace
}  // namespace deskbox::protocol
