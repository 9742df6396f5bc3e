#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "server/runtime/microvm/runtime_state.hpp"
#include "server/runtime/microvm/sandbox.hpp"

namespace deskbox::runtime {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// virtio-serial has no connection boundaries: the guest only learns that the host side
// closed from a control message, and if a new host connection follows before the agent saw
// the old one end, the agent carries on with its old session and never says hello to the
// new one. So a reconnect waits until QEMU has dropped the previous connection and gives the
// guest a moment to notice; and if the agent stays silent anyway, it bounces the connection.
bool MicrovmSandbox::agent_port_connected_locked() {
    for (const auto& chardev : qmp_.execute("query-chardev"))
        if (chardev.value("label", "") == "agent")
            return chardev.value("filename", "").rfind("disconnected:", 0) != 0;
    return false;
}

UniqueFd MicrovmSandbox::connect_agent(std::chrono::milliseconds timeout) {
    const auto started = Clock::now();
    const AgentWait wait{started, started + timeout};
    bool reconnect;
    {
        std::lock_guard lock(mutex_);
        reconnect = agent_connected_before_;
    }
    while (true) {
        if (reconnect) wait_for_old_session_end(wait);
        UniqueFd fd;
        try {
            fd = connect_unix_retry(paths_.agent_socket, wait.deadline,
                                    [&]() { return dead_reason().value_or(std::string()); });
        } catch (const RuntimeError& e) {
            throw agent_failure(e.what());
        }
        if (await_hello(fd.get(), reconnect, wait)) {
            std::lock_guard lock(mutex_);
            agent_connected_before_ = true;
            return fd;
        }
    }
}

std::optional<std::string> MicrovmSandbox::dead_reason() {
    std::lock_guard lock(mutex_);
    if (alive_locked()) return std::nullopt;
    if (snapshotted_) return std::string("it is saved to a snapshot (restore it first)");
    return exit_ ? exit_->reason : std::string("not running");
}

RuntimeError MicrovmSandbox::agent_failure(const std::string& what) {
    std::lock_guard lock(mutex_);
    return RuntimeError("sandbox " + spec_.id + ": " + what + failure_detail());
}

void MicrovmSandbox::check_agent_wait(const AgentWait& wait, const std::string& what) {
    if (auto reason = dead_reason())
        throw agent_failure("the VM ended before its agent connected: " + *reason);
    if (Clock::now() >= wait.deadline) {
        auto waited =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - wait.started);
        std::string cpus;
        {
            std::lock_guard lock(mutex_);
            cpus = vcpu_whereabouts_locked();
        }
        throw agent_failure(what + " within " + std::to_string(waited.count()) +
                            " ms (accelerator " + to_string(accelerator_) + ")" + cpus);
    }
}

void MicrovmSandbox::wait_for_old_session_end(const AgentWait& wait) {
    bool saw_connected = false;
    while (true) {
        {
            std::lock_guard lock(mutex_);
            if (alive_locked() && !agent_port_connected_locked()) break;
        }
        saw_connected = true;
        check_agent_wait(wait, "the previous connection to the agent was not closed");
        std::this_thread::sleep_for(50ms);
    }
    auto settle_until = Clock::now() + (saw_connected ? 1000ms : 200ms);
    while (Clock::now() < settle_until) {
        check_agent_wait(wait, "the agent did not connect again");
        std::this_thread::sleep_for(50ms);
    }
}

bool MicrovmSandbox::await_hello(int fd, bool reconnect, const AgentWait& wait) {
    // QEMU accepts at once; the guest's agent speaks first (its hello) once it has opened
    // the port, so readable data means a live agent on the other end.
    auto bounce_at = Clock::now() + 10s;
    while (true) {
        pollfd p{fd, POLLIN, 0};
        int ready = ::poll(&p, 1, 100);
        if (ready < 0 && errno != EINTR)
            throw agent_failure(std::string("poll on the agent socket: ") + std::strerror(errno));
        if (ready > 0) {
            char byte;
            ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n > 0) return true;
            if (n == 0 || (p.revents & (POLLHUP | POLLERR))) {
                // QEMU closes its sockets while exiting: let it finish, so the reason is
                // its exit (the guest's console says why), not "closed".
                {
                    std::lock_guard lock(mutex_);
                    if (qemu_.pid() > 0 && !exit_) qemu_.wait(shared_->options.stop_timeout);
                }
                auto reason = dead_reason();
                throw agent_failure("the VM ended before its agent connected: " +
                                    reason.value_or("QEMU closed the agent socket"));
            }
        }
        check_agent_wait(wait, "the agent did not connect");
        if (reconnect && Clock::now() >= bounce_at) return false;  // still in its old session
    }
}

}  // namespace deskbox::runtime
