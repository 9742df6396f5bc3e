// The agent of microVM sandboxes: spec.agent_dir as a read-only ext4 image the guest mounts at
// /opt/deskbox, shared by all sandboxes of a state root:
// <state_root>/microvm/agent-<content hash>.img, made when the content changes.
#pragma once

#include <filesystem>
#include <map>
#include <mutex>
#include <string>

namespace deskbox::runtime {

class AgentImages {
  public:
    // The read-only ext4 image of `agent_dir` for /opt/deskbox, made once per content (with
    // `mkfs_ext4`). Throws RuntimeError.
    std::filesystem::path image(const std::filesystem::path& state_root,
                                const std::filesystem::path& agent_dir,
                                const std::string& mkfs_ext4);

  private:
    std::mutex mutex_;
    // agent dir fingerprint (names, sizes, mtimes) -> its image, so the content is hashed
    // once per change rather than per sandbox.
    std::map<std::string, std::filesystem::path> images_;
};

}  // namespace deskbox::runtime
