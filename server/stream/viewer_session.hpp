// One viewer of a sandbox's live stream over a WebSocket (GET /v1/sandboxes/{id}/stream).
//
// Server -> viewer: a text "hello" ({"type":"hello", sandbox, codec, screen:{width,height},
// control, fps}), then binary video packets (header in streaming/live/live_stream.hpp) and text
// pointer messages ("cursor_shape", "cursor" in screen pixels), "pong", "error".
// Viewer -> server (text JSON, with a control token only; a view token's input is ignored and
// counted): {"type":"pointer",x,y,buttons} (DOM MouseEvent.buttons, screen pixels),
// {"type":"wheel",x,y,dx,dy} (notches), {"type":"key",keysym|key,down}, {"type":"text",text},
// {"type":"keyframe"}, {"type":"ping",t}.
//
// Writes go out one at a time; video waits in a bounded PacketQueue (a slow viewer skips to
// the next keyframe, never queues without bound), pointer messages coalesce to the latest.
// Kill of the sandbox closes the socket with 1001 "sandbox killed".
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "server/http/http_server.hpp"
#include "server/sandbox/sandbox.hpp"

namespace deskbox::server {

// Counters shared by all viewer sessions (for /metrics and limits).
struct ViewerCounters {
    std::atomic<std::int64_t> connected{0};
    std::atomic<std::uint64_t> input_ignored{0};  // input sent with a view token
    std::atomic<std::uint64_t> bad_messages{0};
    std::atomic<std::uint64_t> packets_dropped{0};
};

// Takes over the exchange's connection (exchange.taken is set) and serves the stream until the
// viewer leaves or the sandbox goes. Call after authorising the request.
// `encoder` is the sandbox's encoder for `settings`, taken before the upgrade (so a sandbox
// at its cap of encoders is answered with an HTTP error, not a closed socket).
void start_viewer_session(HttpExchange& exchange, std::shared_ptr<Sandbox> sandbox,
                          const streaming::StreamSettings& settings, bool control,
                          ViewerCounters& counters,
                          std::shared_ptr<streaming::LiveEncoder> encoder);

}  // namespace deskbox::server
