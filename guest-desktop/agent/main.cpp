// deskbox-agent: the in-guest service. Owns the desktop session, captures the screen and
// injects input, and serves the agent channel to the host.
#include <signal.h>

#include <cstdio>
#include <exception>
#include <thread>

#include "guest-desktop/agent/desktop_agent.hpp"

int main(int argc, char** argv) {
    using namespace deskbox::agent;
    AgentOptions options;
    try {
        std::vector<std::string> args(argv + 1, argv + argc);
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
