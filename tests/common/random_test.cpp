#include "common/random.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>

namespace deskbox {
namespace {

TEST(Random, HexHasTwoLowercaseDigitsPerByteAndDoesNotRepeat) {
    std::set<std::string> seen;
    for (int i = 0; i < 100; ++i) {
        std::string token = random::hex(16);
        ASSERT_EQ(token.size(), 32u);
        EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
        seen.insert(token);
    }
    EXPECT_EQ(seen.size(), 100u);  // 128-bit tokens: a repeat means the source is broken
    EXPECT_EQ(random::hex(0), "");
}

TEST(Random, FromAlphabetUsesEveryCharacterAndOnlyThose) {
    // 57 characters, 20000 draws: each count near 20000 / 57 ≈ 351.
    const std::string alphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    std::map<char, int> counts;
    std::string drawn = random::from_alphabet(alphabet, 20000);
    ASSERT_EQ(drawn.size(), 20000u);
    for (char c : drawn) ++counts[c];
    EXPECT_EQ(counts.size(), alphabet.size());
    for (auto [c, n] : counts) {
        EXPECT_NE(alphabet.find(c), std::string::npos) << c;
        // 351 ± 6 standard deviations (~18.6): fails by chance about once in 10^8 runs.
        EXPECT_GT(n, 240) << c;
        EXPECT_LT(n, 462) << c;
    }
    EXPECT_THROW(random::from_alphabet("", 4), std::invalid_argument);
    EXPECT_EQ(random::from_alphabet("x", 3), "xxx");
}

TEST(Random, ValuesCoverTheWholeRange) {
    std::set<std::uint16_t> high_bytes;
    for (int i = 0; i < 4000; ++i) high_bytes.insert(random::value<std::uint16_t>() >> 8);
    EXPECT_GT(high_bytes.size(), 250u);  // 256 possible; a missing source gives one
}

}  // namespace
}  // namespace deskbox
