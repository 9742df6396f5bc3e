// What every guest sees, container or microVM: where deskbox's things appear inside, and the
// environment its processes start with.
#pragma once

#include <map>
#include <string>

#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

// Where things appear inside every sandbox (same paths in the microVM guest).
inline constexpr const char* kGuestAgentDir = "/opt/deskbox";  // the agent build, read-only
inline constexpr const char* kGuestRunDir = "/run/deskbox";    // host-shared, agent channel
inline constexpr const char* kAgentSocketName = "agent.sock";

// The environment every guest process starts with, before SandboxSpec::env overrides.
std::map<std::string, std::string> default_guest_env(const SandboxSpec& spec);

}  // namespace deskbox::runtime
