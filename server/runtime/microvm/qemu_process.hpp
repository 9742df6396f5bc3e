// One sandbox's QEMU process, whether this server started it (a child: its wait status is
// known) or adopted it from a server that crashed or was upgraded (not our child: a pidfd
// tells when it ends, but never how). The microVM sandbox treats both alike.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"

namespace deskbox::runtime {

class QemuProcess {
  public:
    QemuProcess() = default;
    // Starts QEMU as our child. Throws std::system_error like ChildProcess::spawn.
    static QemuProcess spawn(const SpawnOptions& options);
    // Takes over a running QEMU that is not our child. Throws RuntimeError if it is gone.
    static QemuProcess adopt(pid_t pid);

    pid_t pid() const;
    bool adopted() const { return pidfd_.valid(); }
    bool running();
    // Blocks until it ends (or the timeout passes: false).
    bool wait(std::optional<std::chrono::milliseconds> timeout = {});
    void signal(int sig);
    // How it ended: nullopt while it runs, and always for an adopted one (only a parent
    // gets a wait status).
    std::optional<ExitStatus> status() const;
    // Lets it run on untracked (the next server adopts it); empty afterwards.
    void release();
    // A new pidfd for it (for pidfd_getfd); -1 with errno if it is gone.
    UniqueFd open_pidfd() const;

  private:
    ChildProcess child_;
    UniqueFd pidfd_;  // adopted: pins its identity against pid reuse
    pid_t adopted_pid_ = -1;
};

}  // namespace deskbox::runtime
