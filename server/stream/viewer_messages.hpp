// What a viewer's text message on the stream WebSocket asks for (the messages are listed in
// viewer_session.hpp), decoded apart from the socket so the fuzzer can check it on any bytes,
// and the rate limit on them.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"
#include "input/pointer_input.hpp"

namespace deskbox::server {

struct ViewerRequest {
    enum class Kind {
        pong,       // answer `reply`
        keyframe,   // ask the encoder for one
        input,      // queue `actions` (may be empty: a pointer that did not move)
        view_only,  // input with a view token: ignored
        bad,        // answer {"type":"error","code":"bad_message","message":error}
    };
    Kind kind = Kind::bad;
    nlohmann::json reply;
    std::vector<input::Action> actions;
    std::string error;
};

// `pointer` keeps what this connection holds (buttons, keys) across messages.
ViewerRequest decode_viewer_message(std::string_view text, input::PointerInput& pointer,
                                    bool control);

// Messages a viewer may send: a burst of kBurst, then kPerSecond (a pointer at 240 Hz and
// typing stay far below; a script flooding the socket does not). Past it the session closes
// with 1008 (policy violation).
class MessageRate {
  public:
    using Clock = std::chrono::steady_clock;
    static constexpr double kPerSecond = 1000;
    static constexpr double kBurst = 2000;

    explicit MessageRate(Clock::time_point now = Clock::now()) : last_(now) {}
    // Counts one message at `now`; false when it is over the rate.
    bool allow(Clock::time_point now);

  private:
    double tokens_ = kBurst;
    Clock::time_point last_;
};

}  // namespace deskbox::server
