#include "server/runtime/exit_classification.hpp"

#include <signal.h>

#include <regex>

#include "server/runtime/runtime_util.hpp"

namespace deskbox::runtime {

ExitInfo classify_container_exit(const ContainerEnd& end) {
    ExitInfo info;
    info.requested = end.requested;
    const auto& status = end.monitor;
    if (end.requested && (!status || status->signal != 0)) {
        info.reason = "killed on request";
        return info;
    }
    if (!status) {
        info.reason = "ended (no runc monitor to tell how)";
        return info;
    }
    if (status->signal != 0) {
        info.exit_code = status->exit_code;
        info.reason = "ended after its runc monitor died of " + signal_name(status->signal);
        return info;
    }
    // runc reports an entry killed by a signal as 128 + signal, like a shell.
    info.exit_code = status->exit_code;
    if (status->exit_code > 128 && status->exit_code < 128 + 65)
        info.signal = status->exit_code - 128;
    if (end.requested) {
        info.reason = "killed on request";
    } else if (info.signal == SIGKILL) {
        // The kernel's OOM killer says so only in the host's log, and the cgroup that counted
        // it is gone with the container.
        info.reason = "killed by SIGKILL (the memory limit of " + std::to_string(end.memory_mb) +
                      " MiB is the usual cause)";
    } else if (info.signal != 0) {
        info.reason = "killed by " + signal_name(info.signal);
    } else {
        info.reason = "exited with code " + std::to_string(status->exit_code);
    }
    if (!end.runc_errors.empty()) info.reason += "; runc: " + end.runc_errors;
    return info;
}

namespace {

// The guest's OOM killer at work, for a reason that would otherwise only say SIGKILL.
std::string guest_oom_note(const std::string& console) {
    static const std::regex oom("Out of memory: Killed process [0-9]+ \\(([^)\r\n]*)\\)");
    std::string last;
    for (auto it = std::sregex_iterator(console.begin(), console.end(), oom);
         it != std::sregex_iterator(); ++it)
        last = (*it)[1].str();
    return last.empty() ? std::string()
                        : " (the guest ran out of memory; its OOM killer killed " + last + ")";
}

}  // namespace

ExitInfo classify_vm_exit(const VmEnd& end) {
    ExitInfo info;
    info.requested = end.requested;
    std::smatch match;
    static const std::regex init_fatal("deskbox-init: FATAL: ([^\r\n]*)");
    static const std::regex init_killed("Attempted to kill init! exitcode=0x([0-9a-fA-F]+)");
    static const std::regex panic("Kernel panic - not syncing: ([^\r\n]*)");
    const auto& status = end.qemu;
    if (end.requested) {
        info.reason = "killed on request";
    } else if (std::regex_search(end.console, match, init_fatal)) {
        info.exit_code = 1;
        info.reason = "the guest's init failed: " + match[1].str();
    } else if (std::regex_search(end.console, match, init_killed)) {
        // The entry is PID 1: its end panics the kernel, whose message has its wait status.
        unsigned long wait_status = std::stoul(match[1].str(), nullptr, 16);
        info.signal = static_cast<int>(wait_status & 0x7f);
        info.exit_code =
            info.signal ? 128 + info.signal : static_cast<int>((wait_status >> 8) & 0xff);
        info.reason = info.signal ? "the entry was killed by " + signal_name(info.signal)
                                  : "the entry exited with code " + std::to_string(info.exit_code);
        if (info.exit_code == 128 + SIGKILL) info.reason += guest_oom_note(end.console);
    } else if (std::regex_search(end.console, match, panic)) {
        info.reason = "guest kernel panic: " + match[1].str();
    } else if (!status && end.adopted) {
        // Not our child (adopted from an earlier server): the kernel tells only its parent how.
        info.reason = "QEMU ended" + (end.qemu_log.empty() ? std::string() : ": " + end.qemu_log);
    } else if (!status) {
        info.reason = "state unknown";
    } else if (status->signal != 0) {
        info.signal = status->signal;
        info.exit_code = 128 + status->signal;
        info.reason = "QEMU was killed by " + signal_name(status->signal);
    } else if (status->exit_code != 0) {
        info.exit_code = status->exit_code;
        info.reason =
            "QEMU exited with code " + std::to_string(status->exit_code) + ": " + end.qemu_log;
    } else {
        info.exit_code = 0;
        info.reason = "the VM shut down";
    }
    return info;
}

}  // namespace deskbox::runtime
