#include "server/runtime/microvm/qemu_process.hpp"

#include <csignal>
#include <cstring>

#include "server/runtime/runtime.hpp"
#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

QemuProcess QemuProcess::spawn(const SpawnOptions& options) {
    QemuProcess process;
    process.child_ = ChildProcess::spawn(options);
    return process;
}

QemuProcess QemuProcess::adopt(pid_t pid) {
    QemuProcess process;
    process.pidfd_.reset(pidfd_open(pid));
    if (!process.pidfd_)
        throw RuntimeError("QEMU process " + std::to_string(pid) +
                           " is gone: " + std::strerror(errno));
    if (pidfd_exited(process.pidfd_.get()))
        throw RuntimeError("QEMU process " + std::to_string(pid) + " has exited");
    process.adopted_pid_ = pid;
    return process;
}

pid_t QemuProcess::pid() const {
    return adopted() ? adopted_pid_ : child_.pid();
}

bool QemuProcess::running() {
    if (adopted()) return !pidfd_exited(pidfd_.get());
    return child_.pid() > 0 && child_.running();
}

bool QemuProcess::wait(std::optional<std::chrono::milliseconds> timeout) {
    if (adopted()) {
        // A day stands for "no timeout": an adopted QEMU is signalled before such a wait.
        return pidfd_wait_exit(pidfd_.get(), timeout.value_or(std::chrono::hours(24)));
    }
    if (child_.pid() <= 0) return true;
    return child_.wait(timeout).has_value();
}

void QemuProcess::signal(int sig) {
    if (adopted())
        pidfd_signal(pidfd_.get(), sig);
    else if (child_.pid() > 0)
        child_.signal(sig);
}

std::optional<ExitStatus> QemuProcess::status() const {
    return adopted() ? std::nullopt : child_.status();
}

void QemuProcess::release() {
    child_.release();
    pidfd_.reset();
    adopted_pid_ = -1;
}

UniqueFd QemuProcess::open_pidfd() const {
    const pid_t p = pid();
    return UniqueFd(p > 0 ? pidfd_open(p) : -1);
}

}  // namespace deskbox::runtime
