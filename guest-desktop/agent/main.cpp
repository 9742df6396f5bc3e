// deskbox-agent: the in-guest service. Owns the desktop session, captures the screen and
// injects input, and serves the agent channel to the host.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "guest-desktop/agent/desktop_agent.hpp"
#include "guest-desktop/services/egress_ca.hpp"
#include "guest-desktop/services/system_service.hpp"

namespace {

pid_t agent_pid = -1;

void forward_signal(int sig) {
    if (agent_pid > 0) ::kill(agent_pid, sig);
}

// As PID 1 of a container or VM, orphans are re-parented to us and must be reaped, and
// signals must be forwarded. The agent proper runs as our child; we exit with its status.
[[noreturn]] void run_as_init() {
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaction(sig, &sa, nullptr);
    for (;;) {
        int status = 0;
        pid_t pid = ::waitpid(-1, &status, 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) ::_exit(1);
        if (pid == agent_pid) {
            if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
            ::_exit(128 + WTERMSIG(status));
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    using namespace deskbox::agent;
    // Not the agent: the one-shot install of the egress CA, run as the guest's root before the
    // agent starts (by the microVM init, or by deskboxd on a container's rootfs).
    if (argc >= 2 && std::string(argv[1]) == "--install-egress-ca")
        return deskbox::services::install_egress_ca_main(
            std::vector<std::string>(argv + 2, argv + argc));
    // In a microVM the init hands us CAP_SYS_TIME and CAP_SYS_ADMIN as ambient capabilities
    // (for system.identity). Ambient and inheritable capabilities pass through execve, so
    // empty both before anything is spawned: the X server, the window manager and every
    // exec'd command run without them, while we keep them in our permitted/effective sets.
    // Without capabilities (containers, tests) this changes nothing.
    try {
        deskbox::services::clear_inheritable_capabilities();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskbox-agent: cannot drop inheritable capabilities: %s\n", e.what());
        return 1;
    }
    // Not dumpable: the sandbox's own programs run as our uid, and must not ptrace us or read
    // our /proc files (fds, memory, environment). execve makes our children dumpable again.
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    // Told the guest trusts the egress CA: check it does before anything of the guest's runs, so
    // that a guest whose install did not happen (an old microVM init) fails to start, saying
    // so, instead of meeting certificate errors later.
    if (const char* ca = std::getenv(deskbox::services::kEgressCaEnv); ca && *ca) {
        if (auto problem = deskbox::services::egress_ca_problem(ca); !problem.empty()) {
            std::fprintf(stderr, "deskbox-agent: %s\n", problem.c_str());
            return 1;
        }
    }
    AgentOptions options;
    std::vector<std::string> args(argv + 1, argv + argc);
    if (auto it = std::find(args.begin(), args.end(), "--init"); it != args.end()) {
        args.erase(it);
        agent_pid = ::fork();
        if (agent_pid < 0) {
            std::perror("deskbox-agent: fork");
            return 1;
        }
        if (agent_pid > 0) run_as_init();
    }
    try {
        if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
            std::fputs(kAgentUsage, stdout);
            return 0;
        }
        options = parse_agent_options(args);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskbox-agent: %s\n%s", e.what(), kAgentUsage);
        return 2;
    }

    // Signals are taken by one thread with sigwait, so they never interrupt X or the channel.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGHUP);
    sigaddset(&signals, SIGUSR2);  // ours: "run ended, stop waiting"
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    try {
        ChannelEndpoint endpoint(options.channel);
        DesktopAgent agent(options);
        std::fprintf(stderr, "deskbox-agent: desktop ready on %s\n", agent.display_name().c_str());
        std::thread signal_thread([&] {
            int sig = 0;
            sigwait(&signals, &sig);
            if (sig != SIGUSR2) std::fprintf(stderr, "deskbox-agent: signal %d, stopping\n", sig);
            agent.shutdown();
        });
        agent.run(endpoint);
        // Wake the signal thread if it is still waiting (run ended on its own).
        pthread_kill(signal_thread.native_handle(), SIGUSR2);
        signal_thread.join();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskbox-agent: %s\n", e.what());
        return 1;
    }
    return 0;
}
