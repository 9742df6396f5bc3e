// Files in a volume without a sandbox (GET/PUT/DELETE /v1/volumes/{name}/files): each
// operation runs deskbox-volume-files (volume_files_main.cpp), confined to the volume's mount
// as the guest user, with the agent's files.* semantics (the same answers and error codes as a
// sandbox's files API).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace deskbox::volumes {

// The agent's error answer ({"code","message","field"?}) from the helper.
class VolumeFileError : public std::runtime_error {
  public:
    VolumeFileError(std::string code, const std::string& message, std::string field)
        : std::runtime_error(message), code_(std::move(code)), field_(std::move(field)) {}
    const std::string& code() const { return code_; }
    const std::string& field() const { return field_; }

  private:
    std::string code_;
    std::string field_;
};

struct VolumeFileReply {
    nlohmann::json result;
    std::string body;
};

// Runs `method` (files.read, files.write, files.list, files.mkdir, files.remove, files.stat)
// with `params` and `body` in the volume mounted at `root`, as uid:gid. `helper`: the
// deskbox-volume-files program. Throws VolumeFileError (the operation's error) or
// std::runtime_error (the helper could not run).
VolumeFileReply run_volume_file_op(const std::filesystem::path& helper,
                                   const std::filesystem::path& root, std::uint32_t uid,
                                   std::uint32_t gid, const std::string& method,
                                   const nlohmann::json& params, const std::string& body = {});

// deskbox-volume-files beside the running program (deskboxd's build or install directory).
std::filesystem::path default_volume_files_helper();

}  // namespace deskbox::volumes
