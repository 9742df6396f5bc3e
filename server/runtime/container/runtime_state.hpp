// What a ContainerRuntime and its sandboxes share (internal to server/runtime/container/).
#pragma once

#include "server/runtime/container/runtime.hpp"
#include "server/runtime/process_sandbox.hpp"

namespace deskbox::runtime {

// The runtime a container sandbox's sandbox.json names.
inline constexpr const char* kContainerRuntimeName = "container";

struct ContainerSandbox::Shared {
    ContainerRuntimeOptions options;
    LiveSandboxes live;
};

}  // namespace deskbox::runtime
