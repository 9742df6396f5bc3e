// Driving runc for container sandboxes: its command lines (one --root per state root), its
// errors, and finding the `runc run` monitor of a sandbox an earlier server started.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "server/runtime/container/runtime.hpp"

namespace deskbox::runtime {

std::vector<std::string> runc_argv(const ContainerRuntimeOptions& options,
                                   const std::filesystem::path& runc_root,
                                   std::initializer_list<std::string> args);
// Runs runc to its end (bounded by options.stop_timeout). Throws RuntimeError if it cannot run.
RunResult run_runc(const ContainerRuntimeOptions& options, const std::filesystem::path& runc_root,
                   std::initializer_list<std::string> args);
// RuntimeError "runc <what> failed ..." unless it succeeded.
void check_runc(const RunResult& result, const std::string& what);
bool runc_has_container(const std::filesystem::path& runc_root, const std::string& id);
// Error messages from runc's JSON log (--log-format json): one object per line.
std::string runc_log_errors(const std::filesystem::path& runc_log);

}  // namespace deskbox::runtime
