#include "server/volumes/volume_files.hpp"

#include <stdexcept>

#include "common/child_process.hpp"

namespace deskbox::volumes {

VolumeFileReply run_volume_file_op(const std::filesystem::path& helper,
                                   const std::filesystem::path& root, std::uint32_t uid,
                                   std::uint32_t gid, const std::string& method,
                                   const nlohmann::json& params, const std::string& body) {
    const std::string request =
        nlohmann::json{{"method", method}, {"params", params}}.dump() + "\n";
    RunResult run;
    try {
        run =
            run_process({helper.string(), root.string(), std::to_string(uid), std::to_string(gid)},
                        std::chrono::seconds(60), request + body);
    } catch (const std::system_error& e) {
        throw std::runtime_error("cannot run " + helper.string() + ": " + e.what());
    }
    const auto newline = run.out.find('\n');
    if (run.timed_out || run.status.exit_code != 0 || newline == std::string::npos)
        throw std::runtime_error(helper.filename().string() + " failed: " +
                                 (run.timed_out ? std::string("timed out") : run.err));
    const auto answer = nlohmann::json::parse(run.out.substr(0, newline), nullptr, false);
    if (!answer.is_object()) throw std::runtime_error("deskbox-volume-files answered garbage");
    if (answer.contains("error")) {
        const auto& error = answer["error"];
        throw VolumeFileError(error.value("code", "io_error"), error.value("message", "failed"),
                              error.value("field", ""));
    }
    return {answer.value("result", nlohmann::json::object()), run.out.substr(newline + 1)};
}

std::filesystem::path default_volume_files_helper() {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    return (ec ? std::filesystem::path() : self.parent_path()) / "deskbox-volume-files";
}

}  // namespace deskbox::volumes
