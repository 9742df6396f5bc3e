#include "server/runtime/container/runc.hpp"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/parse_integer.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> runc_argv(const ContainerRuntimeOptions& options,
                                   const fs::path& runc_root,
                                   std::initializer_list<std::string> args) {
    std::vector<std::string> argv = {options.runc, "--root", runc_root.string()};
    argv.insert(argv.end(), args);
    return argv;
}

RunResult run_runc(const ContainerRuntimeOptions& options, const fs::path& runc_root,
                   std::initializer_list<std::string> args) {
    auto argv = runc_argv(options, runc_root, args);
    try {
        return run_process(argv, options.stop_timeout);
    } catch (const std::system_error& e) {
        throw RuntimeError("cannot run " + options.runc + ": " + e.what());
    }
}

void check_runc(const RunResult& result, const std::string& what) {
    if (result.timed_out) throw RuntimeError("runc " + what + " timed out");
    if (result.status.exit_code != 0 || result.status.signal != 0)
        throw RuntimeError("runc " + what + " failed (exit " +
                           std::to_string(result.status.exit_code) + "): " + trim(result.err));
}

bool runc_has_container(const fs::path& runc_root, const std::string& id) {
    std::error_code ec;
    return fs::exists(runc_root / id, ec);
}

std::string runc_log_errors(const fs::path& runc_log) {
    std::ifstream in(runc_log);
    std::string line, errors;
    while (std::getline(in, line)) {
        auto entry = json::parse(line, nullptr, false);
        if (!entry.is_object() || entry.value("level", "") != "error") continue;
        if (!errors.empty()) errors += "; ";
        errors += entry.value("msg", line);
    }
    return errors;
}

pid_t find_runc_monitor(const fs::path& runc_root, const std::string& id) {
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc", ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
        const auto pid = parse_integer(it->path().filename().string());
        if (!pid || *pid <= 0) continue;
        std::ifstream in(it->path() / "cmdline", std::ios::binary);
        std::vector<std::string> argv;
        for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
        if (argv.size() < 4 || fs::path(argv[0]).filename() != "runc" || argv.back() != id)
            continue;
        const auto root = std::find(argv.begin(), argv.end(), "--root");
        if (root == argv.end() || root + 1 == argv.end() || fs::path(root[1]) != runc_root)
            continue;
        if (std::find(argv.begin(), argv.end(), "run") != argv.end()) return pid_t(*pid);
    }
    return -1;
}

}  // namespace deskbox::runtime
