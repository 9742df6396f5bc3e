// The QEMU command line of a microVM sandbox.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "server/runtime/microvm/runtime.hpp"

namespace deskbox::runtime {

// QEMU's option syntax splits on ',' and takes ",," as a literal comma.
std::string qemu_escape(const std::string& value);

std::vector<std::string> build_qemu_command(const MicrovmRuntimeOptions& options,
                                            const SandboxSpec& spec, const MicrovmPaths& paths,
                                            const MicrovmImage& image,
                                            const std::optional<std::filesystem::path>& agent_image,
                                            Accelerator accel, std::uint64_t tsc_khz, int agent_fd,
                                            int qmp_fd, int tap_fd);

}  // namespace deskbox::runtime
