// Soak with injected faults: cycle after cycle a real deskboxd makes a `minimal` container,
// uses it (screenshot, click, command), hurts it one way (SIGKILL of its agent, its X server,
// its init, the runc monitor, a fork bomb, a memory bomb, or nothing), checks a client sees
// what is documented for that fault (counted: "reported as documented"), kills it and
// checks nothing of it is left (runc state, mounts, cgroups, directory). Every
// --restart-every cycles deskboxd itself is SIGKILLed with sandboxes alive and started again on
// the same state dir: the new server adopts a sandbox that still works and removes one that
// does not, and either's kill leaves nothing. Prints what
// each fault led to, leaks (must be 0), and deskboxd's memory and fds early and late (flat).
//
// Every --microvm-every cycles (0: never) the sandbox is a microVM instead (a template-snapshot
// start), and the fault alternates between nothing and SIGKILL of its QEMU; its residue is the
// same list plus its QEMU process. Every other server crash is with a microVM alive.
//
//   soak_bench [--cycles N] [--seconds S] [--restart-every K] [--microvm-every M]
// Needs root, runc and the `minimal` template built (images/build.py minimal), and for the
// microVM cycles its image (images/build_microvm.py minimal). Bounded by
// count and time; touches only loopback.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/support/load_average.hpp"
#include "bench/support/percentiles.hpp"
#include "common/parse_integer.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"
#include "server/runtime/container/cgroups.hpp"
#include "server/runtime/container/runtime.hpp"
#include "tests/support/deskboxd_process.hpp"
#include "tests/support/test_paths.hpp"

namespace {

using namespace deskbox;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

struct Args {
    int cycles = 200;
    int seconds = 900;
    int restart_every = 50;
    int microvm_every = 10;
};

Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string flag = argv[i];
        if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
        auto value = parse_integer(argv[++i]);
        const int least = flag == "--microvm-every" ? 0 : 1;
        if (!value || *value < least || *value > 1000000)
            throw std::invalid_argument(flag + " needs a number from " + std::to_string(least) +
                                        " to 1000000");
        if (flag == "--cycles")
            a.cycles = *value;
        else if (flag == "--seconds")
            a.seconds = *value;
        else if (flag == "--restart-every")
            a.restart_every = *value;
        else if (flag == "--microvm-every")
            a.microvm_every = *value;
        else
            throw std::invalid_argument("unknown flag " + flag);
    }
    return a;
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

// "Field:   123 kB" from /proc/PID/status, in kB (0 if absent).
long status_kb(pid_t pid, const std::string& field) {
    std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/status"));
    for (std::string line; std::getline(in, line);)
        if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
    return 0;
}

long open_fds(pid_t pid) {
    std::error_code ec;
    long n = 0;
    for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
         !ec && it != fs::directory_iterator(); it.increment(ec))
        ++n;
    return n;
}

pid_t parent_of(pid_t pid) {
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) return -1;
    std::istringstream rest(stat.substr(close + 1));
    char state;
    pid_t ppid = -1;
    rest >> state >> ppid;
    return ppid;
}

// Host pids of the sandbox's processes (its pids cgroup).
std::vector<pid_t> sandbox_pids(const std::string& cgroup) {
    auto dir = runtime::controller_dir("pids", cgroup);
    return dir ? runtime::cgroup_procs(*dir) : std::vector<pid_t>{};
}

enum class Fault { none, agent, xserver, init, runc_monitor, fork_bomb, memory_bomb, qemu };
struct FaultKind {
    Fault fault;
    const char* name;
    // What a client must see after it: the sandbox's state and the screenshot's status. A
    // dead session part ends the sandbox (error, 503); a dead runc monitor does not (the
    // entry's pidfd decides); exhaustion is survived (after processes/kill for pids).
    const char* expected_state;
    unsigned expected_screenshot;
};
constexpr FaultKind kFaults[] = {{Fault::none, "none", "running", 200},
                                 {Fault::agent, "SIGKILL agent", "error", 503},
                                 {Fault::xserver, "SIGKILL Xvfb", "error", 503},
                                 {Fault::init, "SIGKILL init", "error", 503},
                                 {Fault::runc_monitor, "SIGKILL runc monitor", "running", 200},
                                 {Fault::fork_bomb, "fork bomb", "running", 200},
                                 {Fault::memory_bomb, "memory bomb", "running", 200}};
// A microVM cycle's faults, in turn.
constexpr FaultKind kMicrovmFaults[] = {{Fault::none, "microVM: none", "running", 200},
                                        {Fault::qemu, "microVM: SIGKILL QEMU", "error", 503}};

// A microVM's QEMU (from its pid file), or -1.
pid_t qemu_of(const fs::path& state, const std::string& id) {
    auto line = runtime::read_first_line(state / "sandboxes" / id / "qemu.pid");
    auto pid = line ? parse_integer(*line) : std::nullopt;
    return pid ? pid_t(*pid) : -1;
}

// A live QEMU: an adopted one that was killed is init's zombie for a moment, and gone.
bool is_qemu(pid_t pid) {
    if (pid <= 0) return false;
    const std::string proc = "/proc/" + std::to_string(pid);
    const auto stat = runtime::read_first_line(proc + "/stat").value_or("");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z' ||
        stat[paren + 2] == 'X')
        return false;
    return runtime::read_first_line(proc + "/comm").value_or("").rfind("qemu-system", 0) == 0;
}
bool exhausts(Fault f) {
    return f == Fault::fork_bomb || f == Fault::memory_bomb;
}
// Small limits for the exhaustion cycles, so a bomb fills them in about a second.
const json kExhaustionLimits = {{"pids", 96}, {"memory_mb", 256}};

// The process the fault hits, or -1.
pid_t target_of(Fault f, const fs::path& runc_root, const std::string& id,
                const std::string& cgroup) {
    if (f == Fault::runc_monitor) return runtime::find_runc_monitor(runc_root, id);
    auto pids = sandbox_pids(cgroup);
    for (pid_t p : pids) {
        const std::string comm =
            runtime::read_first_line("/proc/" + std::to_string(p) + "/comm").value_or("");
        const bool in_sandbox_parent =
            std::find(pids.begin(), pids.end(), parent_of(p)) != pids.end();
        if (f == Fault::xserver && comm == "Xvfb") return p;
        if (f == Fault::agent && comm == "deskbox-agent" && in_sandbox_parent) return p;
        if (f == Fault::init && comm == "deskbox-agent" && !in_sandbox_parent) return p;
    }
    return -1;
}

std::string error_code(const client::Response& r) {
    auto body = json::parse(r.body, nullptr, false);
    return body.is_object() && body.contains("error")
               ? body["error"].value("code", "") + " " + body["error"].value("field", "")
               : "";
}

std::string stdout_of(const client::Response& r) {
    auto body = json::parse(r.body, nullptr, false);
    return body.is_object() ? body.value("stdout", "") : "";
}

// Fills a limit from inside; returns what a client saw (last: whether the sandbox answered a
// command afterwards) and whether all of it was as documented.
std::pair<std::string, bool> exhaust(client::ApiClient& api, const std::string& base, Fault f) {
    auto command = [&](const json& body) {
        return api.send(client::Method::post, base + "/commands", body.dump(), {}, "*/*");
    };
    std::string seen;
    bool as_documented = false;
    if (f == Fault::fork_bomb) {
        // As in the abuse test: bash retries a failed fork, so the bomb holds every slot.
        command({{"argv", {"bash", "-c", "bomb() { bomb & bomb & wait; }; bomb"}},
                 {"background", true}});
        client::Response refused;
        for (int i = 0; i < 40; ++i) {
            refused = command({{"cmd", "true"}, {"timeout_s", 5}});
            if (refused.status == 409) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
        const auto killed =
            api.send(client::Method::post, base + "/processes/kill", "{}", {}, "*/*");
        const std::string refusal = error_code(refused);
        seen = "command " + std::to_string(refused.status) + " " + refusal + ", processes/kill " +
               std::to_string(killed.status);
        as_documented = refused.status == 409 && refusal == "sandbox_exhausted limits.pids" &&
                        killed.status == 200;
    } else {
        // tail keeps everything until a newline that never comes: it grows to the limit.
        auto bomb = command(
            {{"cmd", "head -c 2000000000 /dev/zero | tail; echo exit=$?"}, {"timeout_s", 60}});
        const bool oom_killed =
            bomb.status == 200 && stdout_of(bomb).find("exit=137") != std::string::npos;
        seen = std::string("bomb ") + (oom_killed ? "OOM-killed" : "not OOM-killed: " + bomb.body);
        as_documented = oom_killed;
    }
    auto after = command({{"cmd", "echo back"}});
    const bool back = after.status == 200 && stdout_of(after) == "back\n";
    seen += std::string(", then command ") + std::to_string(after.status);
    return {seen, as_documented && back};
}

class Server {
  public:
    explicit Server(const fs::path& dir) : dir_(dir) { start(); }
    void start() {
        process_.emplace(
            deskbox::test_paths::kDeskboxd, dir_ / "state", dir_ / "deskboxd.log",
            std::vector<std::string>{"--max-sandboxes", "100", "--default-disk-mb", "512"});
        client::ClientOptions options;
        options.server = process_->url();
        api_.emplace(options);
    }
    void crash_and_restart() {
        process_->kill_hard();
        process_.reset();
        start();
    }
    client::ApiClient& api() { return *api_; }
    pid_t pid() const { return process_->pid(); }
    fs::path state() const { return dir_ / "state"; }

  private:
    fs::path dir_;
    std::optional<test::DeskboxdProcess> process_;
    std::optional<client::ApiClient> api_;
};

struct Footprint {
    long rss_anon_kb = 0, fds = 0, threads = 0;
};
Footprint footprint(pid_t pid) {
    return {status_kb(pid, "RssAnon"), open_fds(pid), status_kb(pid, "Threads")};
}

}  // namespace

int main(int argc, char** argv) try {
    const Args args = parse_args(argc, argv);
    TempDir dir("deskbox-soak");
    Server server(dir.path());
    runtime::ContainerRuntimeOptions runtime_options;
    runtime_options.cgroup_parent = runtime::ContainerRuntime::cgroup_parent_for(server.state());
    runtime::ContainerRuntime inspector(runtime_options);  // for residue(); runs nothing

    const auto deadline = Clock::now() + std::chrono::seconds(args.seconds);
    std::map<std::string, int> outcomes;  // "fault -> status / screenshot answer"
    std::vector<std::string> leaks;
    std::vector<double> cycle_ms, microvm_cycle_ms;
    std::vector<std::string> alive_across_crash;
    int cycles = 0, restarts = 0, create_failures = 0, faults = 0, faults_as_expected = 0;
    // deskboxd's footprint per incarnation: after its 10th cycle and at its last.
    std::vector<std::pair<Footprint, Footprint>> footprints;
    // Both taken right after a DELETE, with nothing alive.
    std::optional<Footprint> early, last_idle;
    int in_incarnation = 0;
    auto end_incarnation = [&] {
        if (early && last_idle) footprints.emplace_back(*early, *last_idle);
        early.reset();
        last_idle.reset();
        in_incarnation = 0;
    };

    auto check_gone = [&](const std::string& id, const char* when, pid_t qemu = -1) {
        for (const auto& r : inspector.residue(server.state(), id))
            leaks.push_back(id + " (" + when + "): " + r);
        if (is_qemu(qemu))
            leaks.push_back(id + " (" + when + "): QEMU " + std::to_string(qemu) + " still runs");
    };
    int microvm_cycles = 0;

    for (; cycles < args.cycles && Clock::now() < deadline; ++cycles) {
        const auto t0 = Clock::now();
        // Every other server crash happens with a microVM alive (adopted, or removed if its
        // QEMU was killed); the others with a container.
        const bool restart_cycle = (cycles + 1) % args.restart_every == 0;
        const bool microvm = args.microvm_every > 0 &&
                             (cycles % args.microvm_every == 0 || (restart_cycle && restarts % 2));
        const FaultKind& kind =
            microvm ? kMicrovmFaults[std::size_t(microvm_cycles++) % std::size(kMicrovmFaults)]
                    : kFaults[std::size_t(cycles) % std::size(kFaults)];
        json request = {{"template", "minimal"}, {"timeout_s", 300}};
        if (microvm) request["runtime"] = "microvm";
        if (exhausts(kind.fault)) request["limits"] = kExhaustionLimits;
        json created;
        try {
            created = server.api().post_json("/v1/sandboxes", request);
        } catch (const std::exception& e) {
            ++create_failures;
            std::fprintf(stderr, "cycle %d: create failed: %s\n", cycles, e.what());
            continue;
        }
        const std::string id = created["id"];
        const std::string base = "/v1/sandboxes/" + id;
        const std::string cgroup = "/" + runtime_options.cgroup_parent + "/" + id;
        server.api().get_bytes(base + "/screenshot");
        server.api().post_json(base + "/actions", {{"type", "click"}, {"x", 100}, {"y", 100}});
        server.api().post_json(base + "/commands", {{"cmd", "echo soak"}});
        const pid_t qemu = microvm ? qemu_of(server.state(), id) : -1;
        if (microvm && !is_qemu(qemu)) leaks.push_back(id + ": no QEMU found by its pid file");

        bool fault_as_expected = true;
        std::string fault_seen;
        if (exhausts(kind.fault)) {
            std::tie(fault_seen, fault_as_expected) = exhaust(server.api(), base, kind.fault);
        } else if (kind.fault != Fault::none) {
            pid_t target = kind.fault == Fault::qemu
                               ? qemu
                               : target_of(kind.fault, server.state() / "runc", id, cgroup);
            if (target <= 0) {
                outcomes[std::string(kind.name) + " -> target not found"]++;
            } else {
                ::kill(target, SIGKILL);
                // Give the server a moment to see it; then what a client gets.
                std::this_thread::sleep_for(std::chrono::milliseconds(300));
            }
        }
        auto shot = server.api().send(client::Method::get, base + "/screenshot", {}, {}, "*/*");
        std::string status = "?";
        try {
            status = server.api().get_json(base).value("state", "?");
        } catch (const std::exception& e) {
            status = std::string("inspect failed: ") + e.what();
        }
        outcomes[std::string(kind.name) + " -> " + (fault_seen.empty() ? "" : fault_seen + "; ") +
                 "status " + status + ", screenshot " + std::to_string(shot.status)]++;
        if (kind.fault != Fault::none) {
            ++faults;
            faults_as_expected += fault_as_expected && status == kind.expected_state &&
                                  shot.status == kind.expected_screenshot;
        }

        // Every restart_every cycles: crash the server with this sandbox (and, after a fault,
        // what is left of it) alive; the new server adopts it if it still works (then it must
        // answer), else removes all of it. Either way its kill then leaves nothing.
        if (restart_cycle) {
            end_incarnation();
            server.crash_and_restart();
            ++restarts;
            auto after = server.api().send(client::Method::get, base, {}, {}, "*/*");
            std::string fate = "removed";
            if (after.status == 200) {
                const auto command =
                    server.api().send(client::Method::post, base + "/commands",
                                      json{{"cmd", "echo adopted"}}.dump(), {}, "*/*");
                fate = "adopted, command " + std::to_string(command.status);
                try {
                    server.api().delete_json(base);
                } catch (const std::exception& e) {
                    leaks.push_back(id + ": DELETE after adoption failed: " + e.what());
                }
            }
            outcomes[std::string(kind.name) + ", then deskboxd SIGKILLed -> " + fate]++;
            check_gone(id, "after the server's crash and restart", qemu);
        } else {
            try {
                server.api().delete_json(base);
            } catch (const std::exception& e) {
                leaks.push_back(id + ": DELETE failed: " + e.what());
            }
            check_gone(id, "after DELETE", qemu);
            last_idle = footprint(server.pid());
            if (!early && in_incarnation + 1 >= 10) early = last_idle;
        }
        (microvm ? microvm_cycle_ms : cycle_ms).push_back(bench::ms_since(t0));
        ++in_incarnation;
    }
    end_incarnation();

    auto p = bench::percentiles(cycle_ms);
    std::printf(
        "soak: %d cycles (%d microVM), %d server crashes+restarts, %d create failures, load %s\n",
        cycles, microvm_cycles, restarts, create_failures, bench::load_average().c_str());
    std::printf("cycle (create, use, fault, check, kill) p50 %.0f ms p95 %.0f ms\n", p.p50, p.p95);
    if (!microvm_cycle_ms.empty()) {
        auto vm = bench::percentiles(microvm_cycle_ms);
        std::printf("microVM cycle p50 %.0f ms p95 %.0f ms\n", vm.p50, vm.p95);
    }
    std::printf("faults injected %d, reported as documented %d\n", faults, faults_as_expected);
    for (const auto& [what, n] : outcomes) std::printf("  %4d x %s\n", n, what.c_str());
    std::printf("leaks: %zu\n", leaks.size());
    for (const auto& l : leaks) std::printf("  %s\n", l.c_str());
    for (const auto& [first, last] : footprints)
        std::printf(
            "deskboxd idle after its 10th cycle: RssAnon %ld kB, %ld fds, %ld threads; at its "
            "last: "
            "%ld kB, %ld fds, %ld threads\n",
            first.rss_anon_kb, first.fds, first.threads, last.rss_anon_kb, last.fds, last.threads);
    return leaks.empty() && create_failures == 0 && faults_as_expected == faults ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "soak_bench: %s\n", e.what());
    return 2;
}
