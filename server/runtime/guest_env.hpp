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
// The egress proxy's CA (SandboxSpec::egress_ca): this file in the agent dir, so the guest sees it
// at kGuestEgressCaPath in both runtimes (a container's bind mount, a microVM's agent disk).
inline constexpr const char* kEgressCaFileName = "egress-ca.pem";
inline constexpr const char* kGuestEgressCaPath = "/opt/deskbox/egress-ca.pem";

// The environment every guest process starts with, before SandboxSpec::env overrides. With
// spec.egress_ca it also points the TLS stacks that do not read the system bundle by default at
// it (Python requests, Node), and tells the agent to check the CA is installed.
std::map<std::string, std::string> default_guest_env(const SandboxSpec& spec);

}  // namespace deskbox::runtime
