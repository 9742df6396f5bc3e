// What a MicrovmRuntime and its sandboxes share (internal to server/runtime/microvm/): the
// options, the live set, and what is worked out once per runtime (accelerator, TSC rate, agent
// images, template snapshot makers).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/runtime/microvm/agent_image.hpp"
#include "server/runtime/microvm/runtime.hpp"

namespace deskbox::runtime {

struct MicrovmSandbox::Shared {
    MicrovmRuntimeOptions options;
    std::mutex mutex;
    LiveSandboxes live;
    std::optional<AcceleratorChoice> accelerator;
    std::optional<std::uint64_t> tsc_khz;
    AgentImages agent_images;
    // template snapshot key -> the lock its maker holds, so a key is made once.
    std::map<std::string, std::shared_ptr<std::mutex>> template_makers;
    std::string qemu_path;    // options.qemu resolved on PATH, once
    std::mutex image_making;  // held while a store template's microVM image is made

    std::uint64_t tsc_khz_cached() {
        std::lock_guard lock(mutex);
        if (!tsc_khz) tsc_khz = host_tsc_khz();
        return *tsc_khz;
    }
    // The read-only ext4 image of `agent_dir` for /opt/deskbox, made once per content.
    std::filesystem::path agent_image(const std::filesystem::path& state_root,
                                      const std::filesystem::path& agent_dir) {
        return agent_images.image(state_root, agent_dir, options.mkfs_ext4);
    }
};

}  // namespace deskbox::runtime
