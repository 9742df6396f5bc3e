#include <gtest/gtest.h>

#include "common/base64.hpp"

namespace deskbox {
namespace {

TEST(Base64, RoundTripsAndRefusesWhatIsNotBase64) {
    const std::vector<std::string> samples = {
        "", "f", "fo", "foo", "foob", "fooba", "foobar", std::string("\0\xff\x10", 3)};
    for (const std::string& s : samples) {
        auto encoded = base64_encode(s);
        EXPECT_EQ(encoded.size() % 4, 0u);
        auto decoded = base64_decode(encoded);
        ASSERT_TRUE(decoded) << encoded;
        EXPECT_EQ(*decoded, s);
    }
    EXPECT_EQ(base64_encode(std::string_view("foobar")), "Zm9vYmFy");
    EXPECT_EQ(base64_decode("Zm9v\nYmE=\r\n").value(), "fooba");  // line-wrapped
    EXPECT_EQ(base64_decode("Zm9vYmE").value(), "fooba");         // unpadded
    EXPECT_FALSE(base64_decode("Zm9v!mFy"));
    EXPECT_FALSE(base64_decode("Zm9vYmE=x"));  // data after the padding
    EXPECT_FALSE(base64_decode("Zm9vYm==="));  // too much padding
    EXPECT_FALSE(base64_decode("Zm9vYmE==="));
}

}  // namespace
}  // namespace deskbox
