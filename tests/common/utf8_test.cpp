#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/utf8.hpp"

namespace deskbox {
namespace {

TEST(Utf8, AcceptsWellFormedAndFindsTheFirstBadByte) {
    EXPECT_TRUE(utf8::is_valid(""));
    EXPECT_TRUE(utf8::is_valid("plain ascii"));
    EXPECT_TRUE(utf8::is_valid("h\xC3\xA9llo \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80"));
    EXPECT_TRUE(utf8::is_valid("\xF4\x8F\xBF\xBF"));  // U+10FFFF, the last code point
    struct Case {
        std::string bytes;
        std::size_t at;
    };
    const std::vector<Case> bad = {
        {"\xFF", 0},
        {"ab\x80", 2},             // a lone continuation byte
        {"ok\xC0\xAF", 2},         // overlong '/'
        {"\xE0\x80\xAF", 0},       // overlong, three bytes
        {"x\xED\xA0\x80", 1},      // a UTF-16 surrogate
        {"\xF4\x90\x80\x80", 0},   // above U+10FFFF
        {"\xF5\x80\x80\x80", 0},   // lead byte that never starts a sequence
        {"\xE6\x97", 0},           // cut off
        {"\xC3\xA9\xE6\x97z", 2},  // cut off before more text
    };
    for (const auto& c : bad) {
        EXPECT_FALSE(utf8::is_valid(c.bytes)) << c.at;
        EXPECT_EQ(utf8::first_invalid(c.bytes), std::optional<std::size_t>(c.at)) << c.at;
    }
}

TEST(Utf8, CodePointsDecodesStrictlyAndLocatesTheBadByte) {
    EXPECT_EQ(utf8::code_points(""), std::u32string());
    EXPECT_EQ(utf8::code_points("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
              (std::u32string{U'a', 0xe9, 0x20ac, 0x1f600}));
    EXPECT_EQ(utf8::code_points("\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80"),
              (std::u32string{0x7f, 0x80, 0x7ff, 0x800}));  // the edges of each length
    EXPECT_EQ(utf8::code_points("\xef\xbf\xbf"), std::u32string{0xffff});
    EXPECT_EQ(utf8::code_points("\xf0\x90\x80\x80"), std::u32string{0x10000});
    EXPECT_EQ(utf8::code_points("\xf4\x8f\xbf\xbf"), std::u32string{0x10ffff});
    EXPECT_EQ(utf8::code_points(std::string("a\0b", 3)), (std::u32string{U'a', 0, U'b'}));

    struct Bad {
        std::string bytes;
        std::size_t offset;
    };
    const std::vector<Bad> bad = {
        {"a\x80", 1},             // lone continuation byte
        {"\xc0\x80", 0},          // overlong NUL
        {"\xc1\xbf", 0},          // overlong
        {"\xe0\x80\xaf", 0},      // overlong '/'
        {"\xed\xa0\x80", 0},      // surrogate U+D800
        {"\xf4\x90\x80\x80", 0},  // U+110000
        {"\xf5\x80\x80\x80", 0},  // lead byte beyond U+10FFFF
        {"ab\xe2\x82", 2},        // truncated at the end
        {"\xe2\x28\xa1", 0},      // bad continuation
        {"ok\xff", 2},
    };
    for (const auto& b : bad) {
        SCOPED_TRACE(::testing::Message() << "offset " << b.offset);
        std::size_t offset = 999;
        EXPECT_FALSE(utf8::code_points(b.bytes, &offset).has_value());
        EXPECT_EQ(offset, b.offset);
        EXPECT_EQ(utf8::first_invalid(b.bytes), std::optional<std::size_t>(b.offset));
    }
}

TEST(Utf8, RepairsEscapesAndTrims) {
    EXPECT_EQ(utf8::to_valid("a\xFF"
                             "b"),
              "a\xEF\xBF\xBD"
              "b");
    // One replacement for a bad lead byte and the continuation bytes that trail it.
    EXPECT_EQ(utf8::to_valid("a\xC0\x80\x80z"), "a\xEF\xBF\xBDz");
    EXPECT_TRUE(utf8::is_valid(utf8::to_valid("\xED\xA0\x80\xF8\x88\x80\x80\x80")));

    EXPECT_EQ(utf8::escape_invalid("caf\xC3\xA9"), "caf\xC3\xA9");  // valid: unchanged
    EXPECT_EQ(utf8::escape_invalid("a\xFF\xFE"
                                   "b\\"),
              "a\\xFF\\xFEb\\");
    EXPECT_TRUE(utf8::is_valid(utf8::escape_invalid("\xE6\x97")));

    nlohmann::json value = {{"ok", "fine"}, {"k\xFF", {"v\x80", 3, nullptr}}};
    EXPECT_THROW(value.dump(), nlohmann::json::type_error);
    nlohmann::json clean = utf8::escape_invalid_in(value);
    EXPECT_EQ(clean.dump(), R"({"k\\xFF":["v\\x80",3,null],"ok":"fine"})");

    EXPECT_EQ(utf8::trim_partial("ab\xE6\x97"), 2u);      // an unfinished 日
    EXPECT_EQ(utf8::trim_partial("ab\xE6\x97\xA5"), 5u);  // a finished one stays
    EXPECT_EQ(utf8::trim_partial("ab\xF0\x9F\x98"), 2u);
    EXPECT_EQ(utf8::trim_partial("ab\xFF"), 3u);  // invalid, not unfinished: left to the checks
    EXPECT_EQ(utf8::trim_partial(""), 0u);

    EXPECT_EQ(utf8::from_latin1("caf\xe9 \xff!"), "caf\xc3\xa9 \xc3\xbf!");
    EXPECT_TRUE(utf8::is_valid(utf8::from_latin1(std::string("\x80\x00\xa0", 3))));
}

}  // namespace
}  // namespace deskbox
