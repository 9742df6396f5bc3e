#include "protocol/message.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace deskbox::protocol {
namespace {

constexpr std::size_t kKindAndHeaderLength = 5;  // the part of frame_length before the header
// An emptied buffer larger than this is released rather than kept for reuse, so one large
// feed() does not pin its memory for the life of the decoder.
constexpr std::size_t kKeepBufferBytes = 4 << 20;

bool valid_kind(std::uint8_t kind) {
    return kind >= static_cast<std::uint8_t>(Kind::hello) &&
           kind <= static_cast<std::uint8_t>(Kind::stream);
}

std::uint32_t read_le32(const unsigned char* p) {
    return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
           static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

void append_le32(std::string& out, std::uint32_t value) {
    for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>(value >> shift));
}

std::size_t saturating_add(std::size_t a, std::size_t b) {
    return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max()
                                                           : a + b;
}

// Deepest array/object nesting in a JSON text (strings skipped). Stops early past `limit`.
std::size_t json_depth(std::string_view text, std::size_t limit) {
    std::size_t depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
            if (deepest > limit) break;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

// nlohmann's messages quote the offending input; keep them printable ASCII and short so a
// reason built from peer bytes can itself be logged or put into JSON safely.
std::string printable(std::string_view text, std::size_t max_length = 200) {
    std::string out;
    for (char c : text.substr(0, max_length)) {
        auto byte = static_cast<unsigned char>(c);
        out.push_back(byte >= 0x20 && byte < 0x7f ? c : '?');
    }
    if (text.size() > max_length) out += "...";
    return out;
}

}  // namespace

std::string_view kind_name(Kind kind) {
    switch (kind) {
        case Kind::hello:
            return "hello";
        case Kind::request:
            return "request";
        case Kind::response:
            return "response";
        case Kind::event:
            return "event";
        case Kind::stream:
            return "stream";
    }
    return "unknown";
}

std::string encode_head(const Message& message, const Limits& limits) {
    const auto kind = static_cast<std::uint8_t>(message.kind);
    if (!valid_kind(kind))
        throw ProtocolError("cannot encode message: unknown kind " + std::to_string(kind));
    // A null header (what `{}` yields in a braced Message) is sent as the empty object.
    if (!message.header.is_object() && !message.header.is_null())
        throw ProtocolError(
            std::string("cannot encode message: header must be a JSON object, not ") +
            message.header.type_name());
    std::string json = "{}";
    try {
        if (!message.header.is_null())
            json = message.header.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
    } catch (const nlohmann::json::exception& e) {
        throw ProtocolError("cannot encode message: header is not valid UTF-8: " +
                            printable(e.what()));
    }
    if (json.size() > limits.max_header_bytes)
        throw ProtocolError("cannot encode message: header of " + std::to_string(json.size()) +
                            " bytes exceeds the limit of " +
                            std::to_string(limits.max_header_bytes));
    if (json_depth(json, limits.max_header_depth) > limits.max_header_depth)
        throw ProtocolError("cannot encode message: header nests deeper than " +
                            std::to_string(limits.max_header_depth) + " levels");
    if (message.body.size() > limits.max_body_bytes)
        throw ProtocolError("cannot encode message: body of " +
                            std::to_string(message.body.size()) + " bytes exceeds the limit of " +
                            std::to_string(limits.max_body_bytes));
    const std::size_t frame_length = kKindAndHeaderLength + json.size() + message.body.size();
    if (frame_length > std::numeric_limits<std::uint32_t>::max())
        throw ProtocolError("cannot encode message: frame of " + std::to_string(frame_length) +
                            " bytes does not fit the 32-bit length field");

    std::string out;
    out.reserve(kPrefixBytes + json.size());
    append_le32(out, static_cast<std::uint32_t>(frame_length));
    out.push_back(static_cast<char>(kind));
    append_le32(out, static_cast<std::uint32_t>(json.size()));
    out += json;
    return out;
}

std::string encode(const Message& message, const Limits& limits) {
    std::string out = encode_head(message, limits);
    out.reserve(out.size() + message.body.size());
    out += message.body;
    return out;
}

FrameDecoder::FrameDecoder(Limits limits) : limits_(limits) {}

void FrameDecoder::fail(std::string reason) {
    poisoned_ = reason;
    buffer_ = {};
    begin_ = end_ = 0;
    pending_.reset();
    throw ProtocolError(std::move(reason));
}

void FrameDecoder::check_poisoned() const {
    if (poisoned_) throw ProtocolError(*poisoned_);
}

std::size_t FrameDecoder::buffered() const {
    return end_ - begin_ + (pending_ ? pending_head_size_ + pending_->body.size() : 0);
}

void FrameDecoder::recycle(std::string&& body) {
    // One spare at most, no larger than a body may be.
    if (body.capacity() >= kRecycleMinBytes && body.capacity() <= limits_.max_body_bytes &&
        body.capacity() > spare_body_.capacity())
        spare_body_ = std::move(body);
}

void FrameDecoder::feed(std::string_view bytes) {
    check_poisoned();
    if (filling_body()) {
        std::string& body = pending_->body;
        const std::size_t take = std::min(bytes.size(), pending_body_size_ - body.size());
        body.append(bytes.data(), take);
        bytes.remove_prefix(take);
    }
    if (bytes.empty()) return;
    std::span<char> space = prepare(bytes.size());
    std::memcpy(space.data(), bytes.data(), bytes.size());
    commit(bytes.size());
}

std::span<char> FrameDecoder::prepare(std::size_t max_bytes) {
    check_poisoned();
    max_bytes = std::max<std::size_t>(max_bytes, 1);
    if (filling_body()) {
        std::string& body = pending_->body;
        prepared_ = std::min(max_bytes, pending_body_size_ - body.size());
        prepared_body_ = true;
        const std::size_t old_size = body.size();
        body.resize(old_size + prepared_);  // within the capacity reserved for the whole body
        return {body.data() + old_size, prepared_};
    }
    if (begin_ == end_) {
        begin_ = end_ = 0;
        if (buffer_.size() > kKeepBufferBytes) buffer_ = {};
    }
    if (buffer_.size() - end_ < max_bytes) {
        // Move the unparsed tail to the front only when that costs no more than the bytes already
        // consumed, so compaction stays linear overall however small the frames are.
        const std::size_t live = end_ - begin_;
        if (begin_ > 0 && begin_ >= live) {
            std::memmove(buffer_.data(), buffer_.data() + begin_, live);
            begin_ = 0;
            end_ = live;
        }
        if (buffer_.size() - end_ < max_bytes)
            buffer_.resize(std::max(buffer_.size() * 2, end_ + max_bytes));
    }
    prepared_ = max_bytes;
    prepared_body_ = false;
    return {buffer_.data() + end_, max_bytes};
}

void FrameDecoder::commit(std::size_t bytes) {
    check_poisoned();
    if (bytes > prepared_) throw std::logic_error("FrameDecoder::commit: more bytes than prepared");
    if (prepared_body_) {
        std::string& body = pending_->body;
        body.resize(body.size() - prepared_ + bytes);
    } else {
        end_ += bytes;
    }
    prepared_ = 0;
    prepared_body_ = false;
}

void FrameDecoder::finish() {
    check_poisoned();
    if (filling_body())
        fail("truncated frame: input ended after " + std::to_string(pending_->body.size()) +
             " of " + std::to_string(pending_body_size_) + " body bytes");
    // Walk the buffered frames by their lengths only; their contents are next()'s business.
    std::size_t at = begin_;
    while (end_ - at >= 4) {
        const std::size_t frame_size =
            4 + std::size_t{read_le32(reinterpret_cast<const unsigned char*>(buffer_.data() + at))};
        if (end_ - at < frame_size) break;
        at += frame_size;
    }
    if (at != end_)
        fail("truncated frame: input ended with " + std::to_string(end_ - at) +
             " bytes of an incomplete frame");
}

std::optional<Message> FrameDecoder::next() {
    check_poisoned();
    if (pending_) {
        if (filling_body()) return std::nullopt;
        std::optional<Message> done = std::move(pending_);
        pending_.reset();
        return done;
    }

    const std::size_t available = end_ - begin_;
    if (available < 4) return std::nullopt;
    const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + begin_);

    const std::uint32_t frame_length = read_le32(p);
    if (frame_length < kKindAndHeaderLength)
        fail("frame length " + std::to_string(frame_length) + " is below the minimum of 5");
    const std::size_t max_frame = saturating_add(
        kKindAndHeaderLength, saturating_add(limits_.max_header_bytes, limits_.max_body_bytes));
    if (frame_length > max_frame)
        fail("frame length " + std::to_string(frame_length) + " exceeds the limit of " +
             std::to_string(max_frame) + " bytes");
    if (available < 5) return std::nullopt;

    const std::uint8_t kind = p[4];
    if (!valid_kind(kind)) fail("unknown message kind " + std::to_string(kind));
    if (available < kPrefixBytes) return std::nullopt;

    const std::uint32_t header_length = read_le32(p + 5);
    if (header_length > frame_length - kKindAndHeaderLength)
        fail("header length " + std::to_string(header_length) + " exceeds the " +
             std::to_string(frame_length - kKindAndHeaderLength) + " bytes the frame has left");
    if (header_length > limits_.max_header_bytes)
        fail("header length " + std::to_string(header_length) + " exceeds the limit of " +
             std::to_string(limits_.max_header_bytes) + " bytes");
    const std::size_t body_size = frame_length - kKindAndHeaderLength - header_length;
    if (body_size > limits_.max_body_bytes)
        fail("body length " + std::to_string(body_size) + " exceeds the limit of " +
             std::to_string(limits_.max_body_bytes) + " bytes");
    if (available < kPrefixBytes + header_length) return std::nullopt;

    const std::string_view header_text(reinterpret_cast<const char*>(p) + kPrefixBytes,
                                       header_length);
    if (json_depth(header_text, limits_.max_header_depth) > limits_.max_header_depth)
        fail("header nests deeper than " + std::to_string(limits_.max_header_depth) + " levels");
    Message message;
    message.kind = static_cast<Kind>(kind);
    try {
        message.header = nlohmann::json::parse(header_text);
    } catch (const nlohmann::json::exception& e) {
        fail("invalid JSON header: " + printable(e.what()));
    }
    if (!message.header.is_object())
        fail(std::string("header must be a JSON object, not ") + message.header.type_name());
    begin_ += kPrefixBytes + header_length;

    const std::size_t have = std::min(end_ - begin_, body_size);
    if (body_size >= kRecycleMinBytes && spare_body_.capacity() >= body_size) {
        message.body = std::move(spare_body_);
        spare_body_ = {};
        message.body.clear();
    } else if (have < body_size) {
        message.body.reserve(body_size);  // bounded by max_body_bytes
    }
    message.body.append(buffer_.data() + begin_, have);
    begin_ += have;
    if (have == body_size) return message;
    pending_ = std::move(message);
    pending_body_size_ = body_size;
    pending_head_size_ = kPrefixBytes + header_length;
    return std::nullopt;
}

}  // namespace deskbox::protocol
