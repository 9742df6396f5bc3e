// The agent-channel wire format. One byte stream per sandbox carries length-prefixed messages:
//
//   u32 LE  frame_length      bytes after this field (>= 5)
//   u8      kind              Kind below
//   u32 LE  header_length     bytes of JSON header that follow
//   ...     header            UTF-8 JSON object
//   ...     body              frame_length - 5 - header_length raw bytes (pixels, file data...)
//
// Every size is bounded by Limits; a violation is a ProtocolError and the channel is closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::protocol {

inline constexpr int kProtocolVersion = 1;
inline constexpr std::string_view kProtocolName = "deskbox-agent";

enum class Kind : std::uint8_t {
    hello = 1,     // {"protocol":"deskbox-agent","version":1,"role":"agent"|"host",...}
    request = 2,   // {"id":N,"method":"...","params":{...}} + optional body
    response = 3,  // {"id":N,"result":{...}} or {"id":N,"error":{"code","message","field"?}} + body
    event = 4,     // {"event":"damage"|...,...} + optional body
    stream = 5,    // {"stream":N,"eof"?:bool} + data: multiplexed byte streams
};

std::string_view kind_name(Kind kind);  // "hello", "request", ...; "unknown" otherwise

inline constexpr std::size_t kPrefixBytes = 9;  // frame_length + kind + header_length

struct Limits {
    std::size_t max_header_bytes = 1 << 20;  // 1 MiB of JSON
    std::size_t max_body_bytes = 64 << 20;   // 64 MiB (a 4K BGRX frame is 33 MiB)
    // Arrays/objects nested deeper than this are refused before parsing, so nothing downstream
    // (copies, dumps, comparisons) recurses deeply on peer-controlled input.
    std::size_t max_header_depth = 64;
};

struct Message {
    Kind kind = Kind::event;
    nlohmann::json header = nlohmann::json::object();
    std::string body;
};

class ProtocolError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Serialises a message; throws ProtocolError if it breaks `limits`, the header is not a JSON
// object (null counts as {}) or a header string is not valid UTF-8.
std::string encode(const Message& message, const Limits& limits = {});
// Everything encode() produces except the body, which follows it unchanged on the wire. Lets a
// sender write a large body straight from the message without copying it.
std::string encode_head(const Message& message, const Limits& limits = {});

// Incremental decoder: feed any split of the byte stream, take whole messages out.
// After a ProtocolError the decoder is poisoned (every later call throws the same error).
//
// Memory: besides the bytes fed and not yet taken, the decoder allocates at most one body of a
// frame whose header passed the limits (reserved once at its exact size, then filled in place),
// so a peer can never make it allocate more than Limits allow per frame.
class FrameDecoder {
  public:
    explicit FrameDecoder(Limits limits = {});

    void feed(std::string_view bytes);
    std::optional<Message> next();  // throws ProtocolError on malformed input

    // Zero-copy feeding for readers: write up to `max_bytes` into the returned span (at least
    // one byte), then commit() how many were written. While the body of a large frame is being
    // received, the span points straight into that message's body.
    std::span<char> prepare(std::size_t max_bytes);
    void commit(std::size_t bytes);

    // Call at end of input: throws ProtocolError("truncated frame ...") if part of a frame is
    // buffered. Whole messages not yet taken with next() are not an error.
    void finish();

    // Bytes received and not yet returned by next() (including a partially received body).
    std::size_t buffered() const;

    // Hands back a large body the caller is done with; the next large body is received into
    // its storage. Fresh multi-megabyte allocations come from mmap and fault in every page,
    // which costs more than the copy itself; reusing one buffer avoids that.
    void recycle(std::string&& body);
    static constexpr std::size_t kRecycleMinBytes = 1 << 20;
    const Limits& limits() const { return limits_; }

  private:
    [[noreturn]] void fail(std::string reason);
    void check_poisoned() const;
    bool filling_body() const { return pending_ && pending_->body.size() < pending_body_size_; }

    Limits limits_;
    std::vector<char> buffer_;  // bytes [begin_, end_) are received and not yet parsed
    std::size_t begin_ = 0;
    std::size_t end_ = 0;
    std::optional<Message> pending_;  // header parsed, body arriving
    std::size_t pending_body_size_ = 0;
    std::size_t pending_head_size_ = 0;  // prefix + header bytes of pending_, for buffered()
    std::size_t prepared_ = 0;           // span size handed out by prepare(), for commit() to check
    bool prepared_body_ = false;         // that span points into pending_->body
    std::optional<std::string> poisoned_;
    std::string spare_body_;  // from recycle()
};

}  // namespace deskbox::protocol
