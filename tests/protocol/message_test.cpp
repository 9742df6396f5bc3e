#include "protocol/message.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace deskbox::protocol {
namespace {

using nlohmann::json;

constexpr Kind kAllKinds[] = {Kind::hello, Kind::request, Kind::response, Kind::event,
                              Kind::stream};

std::string le32(std::uint32_t value) {
    std::string out(4, '\0');
    for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(value >> (8 * i));
    return out;
}

// A frame assembled by hand, so malformed ones can be built.
std::string raw_frame(std::uint32_t frame_length, std::uint8_t kind, std::uint32_t header_length,
                      std::string_view rest = {}) {
    return le32(frame_length) + static_cast<char>(kind) + le32(header_length) + std::string(rest);
}

std::string frame_with_header_text(std::string_view header, std::string_view body = {},
                                   Kind kind = Kind::event) {
    return raw_frame(static_cast<std::uint32_t>(5 + header.size() + body.size()),
                     static_cast<std::uint8_t>(kind), static_cast<std::uint32_t>(header.size()),
                     std::string(header) + std::string(body));
}

std::string pattern(std::size_t size, unsigned seed = 0) {
    std::string out(size, '\0');
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>((i * 131 + seed) >> 3);
    return out;
}

std::vector<Message> decode_all(std::string_view bytes, Limits limits = {}) {
    FrameDecoder decoder(limits);
    decoder.feed(bytes);
    std::vector<Message> out;
    while (auto message = decoder.next()) out.push_back(std::move(*message));
    decoder.finish();
    EXPECT_EQ(decoder.buffered(), 0u);
    return out;
}

void expect_same(const Message& actual, const Message& expected) {
    EXPECT_EQ(actual.kind, expected.kind);
    EXPECT_EQ(actual.header, expected.header);
    EXPECT_EQ(actual.body.size(), expected.body.size());
    EXPECT_TRUE(actual.body == expected.body);  // not EXPECT_EQ: no 8 MB failure dumps
}

// Feeds `bytes`, expects next() to fail with a message containing `reason`, then checks that
// the decoder stays poisoned.
void expect_rejected(std::string_view bytes, const std::string& reason, Limits limits = {}) {
    SCOPED_TRACE(reason);
    FrameDecoder decoder(limits);
    decoder.feed(bytes);
    std::string first_error;
    try {
        while (decoder.next()) {
        }
        ADD_FAILURE() << "no error";
        return;
    } catch (const ProtocolError& e) {
        first_error = e.what();
    }
    EXPECT_NE(first_error.find(reason), std::string::npos) << first_error;
    EXPECT_THROW(decoder.next(), ProtocolError);
    EXPECT_THROW(decoder.feed(encode(Message{})), ProtocolError);
    EXPECT_THROW(decoder.finish(), ProtocolError);
    try {
        decoder.next();
    } catch (const ProtocolError& e) {
        EXPECT_EQ(first_error, e.what()) << "a poisoned decoder repeats its error";
    }
}

TEST(ProtocolMessage, RoundTripsEveryKindWithAndWithoutBody) {
    const std::string bodies[] = {"", "x", std::string("a\0b\xff\x80", 5), pattern(100000)};
    for (Kind kind : kAllKinds) {
        for (const std::string& body : bodies) {
            Message message{
                kind, {{"id", 7}, {"text", "é ☃ \u00e9"}, {"nested", {{"a", {1, 2}}}}}, body};
            std::vector<Message> decoded = decode_all(encode(message));
            ASSERT_EQ(decoded.size(), 1u);
            expect_same(decoded[0], message);
        }
    }
}

TEST(ProtocolMessage, EncodesTheDocumentedLayout) {
    Message message{Kind::request, {{"a", 1}}, "BODY"};
    const std::string bytes = encode(message);
    const std::string header = R"({"a":1})";
    EXPECT_EQ(bytes, le32(5 + header.size() + 4) + '\x02' + le32(header.size()) + header + "BODY");
    EXPECT_EQ(encode_head(message) + message.body, bytes);
}

TEST(ProtocolMessage, RoundTripsAnEightMegabyteBodyInOneFeedAndInPieces) {
    Message message{
        Kind::event, {{"event", "damage"}, {"width", 2048}, {"height", 1024}}, pattern(8 << 20, 5)};
    const std::string bytes = encode(message);

    std::vector<Message> whole = decode_all(bytes);
    ASSERT_EQ(whole.size(), 1u);
    expect_same(whole[0], message);

    // The reader path: prepare() hands out space inside the body once the header is parsed.
    FrameDecoder decoder;
    std::size_t offset = 0;
    std::optional<Message> decoded;
    while (offset < bytes.size()) {
        std::span<char> space = decoder.prepare(64 << 10);
        ASSERT_GE(space.size(), 1u);
        const std::size_t n = std::min(space.size(), bytes.size() - offset);
        std::memcpy(space.data(), bytes.data() + offset, n);
        decoder.commit(n);
        offset += n;
        auto next = decoder.next();
        if (next) {
            EXPECT_EQ(offset, bytes.size()) << "message complete before its last byte";
            decoded = std::move(next);
        }
    }
    ASSERT_TRUE(decoded);
    expect_same(*decoded, message);
    EXPECT_EQ(decoder.buffered(), 0u);
}

TEST(ProtocolMessage, DecodesByteAtATime) {
    std::vector<Message> messages;
    std::string stream;
    for (int i = 0; i < 12; ++i) {
        Message message{kAllKinds[i % 5], {{"seq", i}}, pattern(i * 37, i)};
        stream += encode(message);
        messages.push_back(std::move(message));
    }
    FrameDecoder decoder;
    std::vector<Message> decoded;
    std::size_t frame_end = encode(messages[0]).size();
    for (std::size_t i = 0; i < stream.size(); ++i) {
        decoder.feed(stream.substr(i, 1));
        auto message = decoder.next();
        if (message) {
            EXPECT_EQ(i + 1, frame_end) << "a message must appear exactly at its last byte";
            decoded.push_back(std::move(*message));
            if (decoded.size() < messages.size())
                frame_end += encode(messages[decoded.size()]).size();
        }
    }
    ASSERT_EQ(decoded.size(), messages.size());
    for (std::size_t i = 0; i < messages.size(); ++i) expect_same(decoded[i], messages[i]);
    EXPECT_EQ(decoder.buffered(), 0u);
}

TEST(ProtocolMessage, DecodesManyFramesFromOneFeedInOrder) {
    std::string stream;
    const int count = 20000;
    for (int i = 0; i < count; ++i)
        stream += encode(
            Message{Kind::response, {{"id", i}, {"result", json::object()}}, i % 3 ? "" : "b"});
    std::vector<Message> decoded = decode_all(stream);
    ASSERT_EQ(decoded.size(), static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) {
        ASSERT_EQ(decoded[i].header["id"], i);
        ASSERT_EQ(decoded[i].body, i % 3 ? "" : "b");
    }
}

TEST(ProtocolMessage, InterleavedFeedsAndTakesKeepEveryByte) {
    // Frames split across feeds at awkward points while messages are taken in between.
    std::string stream;
    std::vector<Message> messages;
    for (int i = 0; i < 200; ++i) {
        messages.push_back(Message{Kind::event, {{"seq", i}}, pattern((i * 7919) % 5000, i)});
        stream += encode(messages.back());
    }
    FrameDecoder decoder;
    std::vector<Message> decoded;
    for (std::size_t offset = 0, step = 1; offset < stream.size(); step = step * 3 % 4099 + 1) {
        const std::size_t n = std::min(step, stream.size() - offset);
        decoder.feed(std::string_view(stream).substr(offset, n));
        offset += n;
        while (auto message = decoder.next()) decoded.push_back(std::move(*message));
    }
    ASSERT_EQ(decoded.size(), messages.size());
    for (std::size_t i = 0; i < messages.size(); ++i) expect_same(decoded[i], messages[i]);
}

TEST(ProtocolMessage, RejectsMalformedFrames) {
    expect_rejected(raw_frame(0, 4, 0), "frame length 0 is below the minimum of 5");
    expect_rejected(raw_frame(4, 4, 0), "frame length 4 is below the minimum of 5");
    expect_rejected(raw_frame(7, 0, 2, "{}"), "unknown message kind 0");
    expect_rejected(raw_frame(7, 6, 2, "{}"), "unknown message kind 6");
    expect_rejected(raw_frame(7, 255, 2, "{}"), "unknown message kind 255");
    expect_rejected(raw_frame(7, 4, 3, "{}"),
                    "header length 3 exceeds the 2 bytes the frame has left");
    expect_rejected(frame_with_header_text(""), "invalid JSON header");
    expect_rejected(frame_with_header_text(R"({"a":})"), "invalid JSON header");
    expect_rejected(frame_with_header_text(R"({"a":1} x)"), "invalid JSON header");
    expect_rejected(frame_with_header_text("{\"a\":\"\xc3\x28\"}"), "invalid JSON header");
    expect_rejected(frame_with_header_text("{\"a\":1}\xff"), "invalid JSON header");
    expect_rejected(frame_with_header_text("[1,2]"), "header must be a JSON object, not array");
    expect_rejected(frame_with_header_text("\"x\""), "header must be a JSON object, not string");
    expect_rejected(frame_with_header_text("17"), "header must be a JSON object, not number");
    expect_rejected(frame_with_header_text("null"), "header must be a JSON object, not null");
    expect_rejected("GET / HTTP/1.1\r\nHost: x\r\n\r\n", "exceeds the limit");
    std::string deep = R"({"a":)" + std::string(64, '[') + std::string(64, ']') + "}";
    expect_rejected(frame_with_header_text(deep), "header nests deeper than 64 levels");
    // A good frame before the bad one is still delivered.
    FrameDecoder decoder;
    decoder.feed(encode(Message{Kind::event, {{"ok", true}}, ""}) + raw_frame(7, 9, 2, "{}"));
    EXPECT_TRUE(decoder.next());
    EXPECT_THROW(decoder.next(), ProtocolError);
}

TEST(ProtocolMessage, ErrorMessagesStayPrintable) {
    FrameDecoder decoder;
    decoder.feed(frame_with_header_text("{\"\xfe\xff\":1}"));
    try {
        decoder.next();
        FAIL() << "no error";
    } catch (const ProtocolError& e) {
        for (unsigned char c : std::string(e.what())) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
    }
}

TEST(ProtocolMessage, EnforcesSizeLimitsAtTheBoundary) {
    const Limits limits{.max_header_bytes = 64, .max_body_bytes = 1000, .max_header_depth = 4};
    const std::string header_64 = R"({"k":")" + std::string(64 - 8, 'x') + "\"}";
    ASSERT_EQ(header_64.size(), 64u);
    EXPECT_EQ(decode_all(frame_with_header_text(header_64, std::string(1000, 'b')), limits).size(),
              1u);
    expect_rejected(frame_with_header_text(R"({"k":")" + std::string(64 - 7, 'x') + "\"}"),
                    "header length 65 exceeds the limit of 64 bytes", limits);
    expect_rejected(frame_with_header_text("{}", std::string(1001, 'b')),
                    "body length 1001 exceeds the limit of 1000 bytes", limits);
    expect_rejected(raw_frame(5 + 64 + 1000 + 1, 4, 2), "frame length 1070 exceeds the limit",
                    limits);
    EXPECT_EQ(decode_all(frame_with_header_text(R"({"a":[[[1]]]})"), limits).size(), 1u);
    expect_rejected(frame_with_header_text(R"({"a":[[[[1]]]]})"), "nests deeper than 4", limits);
    // Brackets inside strings are not nesting.
    EXPECT_EQ(decode_all(frame_with_header_text(R"({"a":"[[[[[[\"{{{{"})"), limits).size(), 1u);
}

TEST(ProtocolMessage, RejectsAnOversizeFrameFromItsPrefixAlone) {
    // Default limits; the 9-byte prefix claims a 100 MB body. The decoder must refuse at once
    // instead of buffering towards it.
    expect_rejected(raw_frame(100 << 20, 4, 2), "frame length 104857600 exceeds the limit");
    expect_rejected(le32(0xffffffff), "frame length 4294967295 exceeds the limit");
    // Header length over the limit is caught before the header arrives.
    expect_rejected(raw_frame((2 << 20) + 5, 4, 2 << 20),
                    "header length 2097152 exceeds the limit");
}

TEST(ProtocolMessage, TruncationIsAnErrorOnlyAtFinish) {
    const std::string frame = encode(Message{Kind::event, {{"event", "damage"}}, pattern(5000)});
    for (std::size_t cut : {std::size_t{1}, std::size_t{4}, std::size_t{8}, std::size_t{9},
                            std::size_t{20}, frame.size() - 1}) {
        SCOPED_TRACE(cut);
        FrameDecoder decoder;
        decoder.feed(std::string_view(frame).substr(0, cut));
        EXPECT_FALSE(decoder.next());
        EXPECT_EQ(decoder.buffered(), cut);
        try {
            decoder.finish();
            FAIL() << "truncation not reported";
        } catch (const ProtocolError& e) {
            EXPECT_NE(std::string(e.what()).find("truncated frame"), std::string::npos) << e.what();
        }
    }
    // Whole frames not yet taken are not truncation.
    FrameDecoder decoder;
    decoder.feed(frame);
    EXPECT_NO_THROW(decoder.finish());
    EXPECT_TRUE(decoder.next());
}

TEST(ProtocolMessage, EncodeRefusesWhatTheDecoderWouldRefuse) {
    auto expect_encode_error = [](const Message& message, const std::string& reason,
                                  Limits limits = {}) {
        try {
            encode(message, limits);
            ADD_FAILURE() << "no error for " << reason;
        } catch (const ProtocolError& e) {
            EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
        }
    };
    expect_encode_error(Message{Kind::event, json::array({1}), ""}, "header must be a JSON object");
    expect_encode_error(Message{Kind::event, {{"a", "\xc3\x28"}}, ""}, "not valid UTF-8");
    expect_encode_error(Message{static_cast<Kind>(9), json::object(), ""}, "unknown kind 9");
    const Limits small{.max_header_bytes = 10, .max_body_bytes = 3, .max_header_depth = 2};
    expect_encode_error(Message{Kind::event, {{"long", "xxxxxxxx"}}, ""}, "exceeds the limit of 10",
                        small);
    expect_encode_error(Message{Kind::event, json::object(), "abcd"},
                        "body of 4 bytes exceeds the limit of 3", small);
    expect_encode_error(
        Message{Kind::event, json::parse(R"({"a":{"b":[1]}})"), ""}, "nests deeper than 2",
        Limits{.max_header_bytes = 100, .max_body_bytes = 3, .max_header_depth = 2});
}

TEST(ProtocolMessage, RecycledBodyStorageIsReusedForTheNextLargeBody) {
    const Message first{Kind::event, {{"n", 1}}, pattern(3 << 20, 1)};
    const Message second{Kind::event, {{"n", 2}}, pattern(2 << 20, 2)};
    const Message small{Kind::event, {{"n", 3}}, pattern(1000, 3)};
    const std::string bytes = encode(first) + encode(small) + encode(second);
    FrameDecoder decoder;
    // Fed in pieces, so the large bodies are filled in place rather than copied out whole.
    std::vector<Message> decoded;
    const char* recycled = nullptr;
    for (std::size_t offset = 0; offset < bytes.size(); offset += 100000) {
        decoder.feed(std::string_view(bytes).substr(offset, 100000));
        while (auto message = decoder.next()) {
            if (message->header["n"] == 1) {
                expect_same(*message, first);
                recycled = message->body.data();
                decoder.recycle(std::move(message->body));
            } else {
                decoded.push_back(std::move(*message));
            }
        }
    }
    ASSERT_EQ(decoded.size(), 2u);
    expect_same(decoded[0], small);
    EXPECT_NE(decoded[0].body.data(), recycled) << "small bodies do not take the spare";
    expect_same(decoded[1], second);
    EXPECT_EQ(decoded[1].body.data(), recycled) << "the 2 MiB body reuses the 3 MiB buffer";
}

TEST(ProtocolMessage, CommitRejectsMoreThanPrepared) {
    FrameDecoder decoder;
    decoder.prepare(4);
    EXPECT_THROW(decoder.commit(5), std::logic_error);
}

}  // namespace
}  // namespace deskbox::protocol
