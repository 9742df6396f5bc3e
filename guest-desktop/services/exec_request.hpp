// What an exec.* request asks for, checked field by field (bad input names its field).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "guest-desktop/services/exec_service.hpp"

namespace deskbox::services {

// exec.run's params (see exec_service.hpp).
struct CommandSpec {
    std::vector<std::string> argv;
    nlohmann::json command;  // what the caller asked for, for list()
    std::map<std::string, std::string> env;
    std::string cwd;
    std::optional<std::chrono::milliseconds> timeout;
    bool background = false;
    bool stream = false;
    bool stdin_open = false;
    std::string stdin_param;
};

CommandSpec parse_run(const nlohmann::json& params, const ExecLimits& limits);
// exec.kill's "signal": a number or a name ("TERM", "SIGKILL"); SIGTERM when absent.
int parse_signal(const nlohmann::json& params);
// A required "pid".
pid_t parse_pid(const nlohmann::json& params);

}  // namespace deskbox::services
