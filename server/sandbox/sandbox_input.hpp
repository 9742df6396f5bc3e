// A sandbox's input: action requests in any dialect (scaled from API to screen pixels, aimed at
// targets found on the screen, split at screenshots and zooms), and the input of viewers and
// VNC clients, run in order on one worker so I/O threads never wait for the agent.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/serial_worker.hpp"
#include "input/actions.hpp"
#include "server/sandbox/action_request.hpp"
#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/sandbox_screen.hpp"

namespace deskbox::server {

// What input needs of its sandbox besides the agent and the screen.
struct InputLink {
    std::string sandbox_id;         // for the server's log
    std::function<bool()> running;  // queued input is dropped unless it is
    std::function<void(const std::string& kind, const nlohmann::json& detail)> audit;
};

class SandboxInput {
  public:
    // `agent` and `screen` outlive the input (all are the sandbox's).
    SandboxInput(AgentClient& agent, SandboxScreen& screen, InputLink link);
    SandboxInput(const SandboxInput&) = delete;
    SandboxInput& operator=(const SandboxInput&) = delete;

    // Runs a request the front door read (action_request.hpp): checks its actions lie on the
    // screen, scales them to screen pixels, runs them and answers in the request's dialect
    // (input/dialects/replies.hpp). Throws SandboxError.
    nlohmann::json actions(ActionsRequest request);
    // Input from a viewer or VNC client (screen coordinates, already on screen): run in order
    // on the input worker. False if it was dropped: the sandbox is not running or too much
    // input is queued.
    bool queue_input(std::vector<input::Action> actions, const std::string& source);
    // A VNC client's clipboard text, set in the guest in order with its input (dropped past
    // 256 KiB or when the sandbox is not running).
    void queue_clipboard(std::string text);
    // Runs what is queued, then refuses more; idempotent. Before the agent client goes.
    void stop() { worker_.stop(); }

  private:
    // The request's actions moved from API to screen pixels, each checked to lie on the
    // screen. SandboxError (invalid) invalid_action naming the coordinate that does not.
    void to_screen(ActionsRequest& request, const std::optional<input::CoordinateScaler>& scaler);
    nlohmann::json run(ActionsRequest& request);
    nlohmann::json run_segment(const std::vector<input::Action>& actions, std::size_t offset);
    // Finds the target (waiting for it up to its timeout) and aims the action there. Returns
    // the match. SandboxError (unprocessable) target_not_found if it does not appear.
    nlohmann::json aim_at_target(input::Action& action, const TargetSpec& target);
    // The same for an accessible element (target.accessible): found with accessibility.find,
    // aimed at the centre of its bounds. The match (bounds in API pixels).
    nlohmann::json aim_at_accessible(input::Action& action, const TargetSpec& target);

    AgentClient& agent_;
    SandboxScreen& screen_;
    InputLink link_;
    SerialWorker worker_{512};  // stopped before what its jobs use goes away
};

}  // namespace deskbox::server
