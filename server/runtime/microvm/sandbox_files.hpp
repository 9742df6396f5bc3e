// The files of one microVM sandbox under <state_root>/sandboxes/<id>/ (layout in
// runtime.hpp): their paths, the record sandbox.json, and what finds and removes a sandbox's
// leftovers (its QEMU, sockets, directory) after a kill or a server crash.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

// The runtime a sandbox.json names (the container runtime leaves such dirs alone).
inline constexpr const char* kMicrovmRuntimeName = "microvm";

// The files of one sandbox (see the layout above).
struct MicrovmPaths {
    explicit MicrovmPaths(const std::filesystem::path& state_root, const std::string& id);
    std::filesystem::path dir, metadata, disk, config, agent_socket, qmp_socket, console_log,
        qemu_log, pid_file, memory;
};

// The boot files of one template.
struct MicrovmImage {
    std::filesystem::path dir, kernel, initramfs, rootfs;
};

// The spec as sandbox.json keeps it: an adopted snapshot rebuilds its command line from it.
nlohmann::json spec_to_json(const SandboxSpec& spec);
SandboxSpec spec_from_json(const nlohmann::json& j);  // throws nlohmann::json::exception
// A JSON object from `file`. Throws RuntimeError.
nlohmann::json read_json_file(const std::filesystem::path& file);

// A Unix listening socket at `path` (reached through its directory's fd when the path is
// longer than sun_path). QEMU gets the fd, so the socket exists before QEMU runs and no
// path length limit applies to QEMU's side.
UniqueFd listen_unix(const std::filesystem::path& path);

// The pid in a pid file; -1 if it has none.
pid_t read_pid_file(const std::filesystem::path& file);
// True if `pid` is a live (not zombie) QEMU of sandbox dir `dir`: a pid file can outlive its
// process, and the pid can be reused by something else.
bool is_our_qemu(pid_t pid, const std::filesystem::path& dir);
// What of sandbox `id` still exists: its QEMU, its sockets, its directory (if `dir_counts`).
std::vector<std::string> residue_of(const std::filesystem::path& state_root, const std::string& id,
                                    bool dir_counts);
// Removes everything sandbox `id` may hold: its QEMU (if a crashed server left it running),
// its sockets and (unless kept) its directory. Used by kill and leftover cleanup alike.
void teardown(const std::filesystem::path& state_root, const std::string& id, bool keep_state,
              std::chrono::milliseconds stop_timeout);

}  // namespace deskbox::runtime
