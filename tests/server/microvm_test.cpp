// The microVM runtime against real QEMU (TCG), booting the `minimal` template's kernel,
// initramfs and root image with the real deskbox-agent inside.
//
// Needs qemu-system-x86_64 and the image: sudo images/build.py minimal &&
// sudo images/build_microvm.py minimal. Tests that boot are skipped, saying so, without them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "protocol/channel.hpp"
#include "protocol/rpc.hpp"
#include "server/network/sandbox_network.hpp"
#include "server/runtime/microvm/runtime.hpp"
#include "tests/support/test_ca.hpp"
#include "tests/support/test_internet.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const fs::path kSourceDir = deskbox::test_paths::kSourceDir;
const fs::path kAgentBinary = deskbox::test_paths::kAgent;
// Booting under TCG on a loaded 2-core machine: tens of seconds; this only bounds a hang.
constexpr auto kBootTimeout = 240s;

std::string trim_line(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

// The minimal template's rootfs if both it and its microVM files are built; else why not.
struct ImageLookup {
    fs::path rootfs;
    std::string missing;
};

ImageLookup find_minimal_image() {
    ImageLookup lookup;
    try {
        auto qemu = run_process({"qemu-system-x86_64", "--version"}, 30s);
        if (qemu.status.exit_code != 0) lookup.missing = "qemu-system-x86_64 does not run";
    } catch (const std::exception&) {
        lookup.missing = "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)";
    }
    if (!lookup.missing.empty()) return lookup;
    auto printed = run_process(
        {"python3", (kSourceDir / "images/build.py").string(), "minimal", "--print-path"});
    lookup.rootfs = trim_line(printed.out);
    std::error_code ec;
    if (printed.status.exit_code != 0 || !fs::is_directory(lookup.rootfs, ec)) {
        lookup.missing = "the minimal template is not built (sudo images/build.py minimal)";
    } else if (!fs::exists(lookup.rootfs.parent_path() / "microvm/rootfs.ext4", ec)) {
        lookup.missing =
            "the minimal template's microVM image is not built (sudo images/build_microvm.py "
            "minimal)";
    }
    return lookup;
}

const ImageLookup& minimal_image() {
    static const ImageLookup lookup = find_minimal_image();
    return lookup;
}

// Every process whose command line mentions `needle`: no QEMU may outlive its sandbox.
std::vector<pid_t> processes_mentioning(const std::string& needle) {
    std::vector<pid_t> found;
    for (const auto& entry : fs::directory_iterator("/proc")) {
        std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream in(entry.path() / "cmdline", std::ios::binary);
        std::string cmdline((std::istreambuf_iterator<char>(in)), {});
        if (cmdline.find(needle) == std::string::npos) continue;
        std::ifstream stat(entry.path() / "stat");
        std::string line;
        std::getline(stat, line);
        auto paren = line.rfind(')');
        if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z')
            continue;
        found.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return found;
}

class MicrovmRuntimeTest : public ::testing::Test {
  protected:
    void SetUp() override {
        fs::create_directories(agent_.path() / "bin");
        fs::copy_file(kAgentBinary, agent_.path() / "bin/deskbox-agent");
        ::chmod(agent_.path().c_str(), 0755);
        options_.accelerator = Accelerator::tcg;
    }

    void require_image() {
        if (!minimal_image().missing.empty()) GTEST_SKIP() << minimal_image().missing;
    }

    SandboxSpec spec(const std::string& name) {
        SandboxSpec s;
        s.id = "mvm-" + std::to_string(::getpid()) + "-" + name;
        s.template_rootfs = minimal_image().rootfs.empty() ? fs::path("/nonexistent/rootfs")
                                                           : minimal_image().rootfs;
        s.agent_dir = agent_.path();
        s.entry = {"/opt/deskbox/bin/deskbox-agent",
                   "--init",
                   "--channel",
                   kAgentChannelArg,
                   "--size",
                   "1024x768",
                   "--dpi",
                   "96",
                   "--wm",
                   "openbox"};
        s.width = 1024;
        s.height = 768;
        s.limits.memory_mb = 1024;
        s.limits.cpus = 2;
        s.hostname = "vm-" + name;
        s.state_root = state_.path();
        return s;
    }

    void expect_nothing_left(MicrovmRuntime& runtime, const SandboxSpec& s) {
        EXPECT_TRUE(runtime.residue(s.state_root, s.id).empty());
        EXPECT_FALSE(fs::exists(sandbox_dir(s.state_root, s.id)));
        EXPECT_TRUE(processes_mentioning(sandbox_dir(s.state_root, s.id).string()).empty())
            << "a process of the sandbox survived";
        EXPECT_TRUE(runtime.list_leftovers(s.state_root).empty());
    }

    TempDir state_{"deskbox-microvm-state"};
    TempDir agent_{"deskbox-microvm-agent"};
    MicrovmRuntimeOptions options_;
};

TEST_F(MicrovmRuntimeTest, BootsMinimalAnswersTheAgentPausesResumesAndLeavesNothing) {
    require_image();
    MicrovmRuntime runtime(options_);
    auto s = spec("boot");
    auto started = std::chrono::steady_clock::now();
    auto sandbox = runtime.start_microvm(s);
    ASSERT_TRUE(sandbox->alive());
    EXPECT_EQ(sandbox->state(), SandboxState::running);

    UniqueFd fd;
    try {
        fd = sandbox->connect_agent(kBootTimeout);
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    auto booted = std::chrono::steady_clock::now();
    std::printf("[ figures  ] cold boot -> agent connected under TCG: %.1f s\n",
                std::chrono::duration<double>(booted - started).count());

    int raw = fd.release();
    auto channel = std::make_unique<protocol::Channel>(raw, raw);
    json hello = protocol::handshake(*channel, "host");
    EXPECT_EQ(hello["screen"]["width"], 1024);
    EXPECT_EQ(hello["screen"]["height"], 768);
    protocol::RpcClient client(std::move(channel));
    client.start();
    EXPECT_NO_THROW(client.call("ping", json::object(), {}, 60s));
    auto info = client.call("session.info", json::object(), {}, 60s).result;
    EXPECT_EQ(info["screen"]["width"], 1024);
    EXPECT_EQ(info["screen"]["height"], 768);
    EXPECT_EQ(info["dpi"], 96);
    ASSERT_TRUE(info["display"].is_string());
    EXPECT_EQ(info["display"].get<std::string>().substr(0, 1), ":");

    // It is a VM of its own: its own kernel, our hostname, the session user, the agent disk
    // read-only at /opt/deskbox, and the root disk writable (its qcow2 layer).
    auto run =
        client
            .call("exec.run",
                  {{"cmd",
                    "uname -r; hostname; id -u; grep ' /opt/deskbox ' /proc/mounts | "
                    "cut -d' ' -f4 | cut -d, -f1; echo hi > /home/user/probe && cat "
                    "/home/user/probe; test -c /dev/virtio-ports/deskbox.agent && echo port; "
                    "ls /sys/class/net; date +%s"},
                   {"timeout_s", 60}},
                  {}, 90s)
            .result;
    std::ifstream build_json(sandbox->image().dir / "build.json");
    std::string release = json::parse(build_json)["kernel"]["release"];
    EXPECT_EQ(run["exit_code"], 0) << run.dump();
    std::string out = run["stdout"];
    auto clock_at = out.rfind('\n', out.size() - 2) + 1;
    // Only loopback without network; the guest clock (RTC at boot, then the host's TSC)
    // agrees with ours (a broken TSC rate would drift minutes during the boot).
    EXPECT_EQ(out.substr(0, clock_at), release + "\nvm-boot\n1000\nro\nhi\nport\nlo\n") << out;
    long long guest_clock = std::stoll(out.substr(clock_at));
    EXPECT_LT(std::llabs(guest_clock - static_cast<long long>(std::time(nullptr))), 120) << out;

    sandbox->pause();
    EXPECT_EQ(sandbox->state(), SandboxState::paused);
    EXPECT_EQ(sandbox->qmp("query-status")["status"], "paused");
    sandbox->resume();
    EXPECT_EQ(sandbox->state(), SandboxState::running);
    EXPECT_EQ(sandbox->qmp("query-status")["status"], "running");
    EXPECT_NO_THROW(client.call("ping", json::object(), {}, 60s)) << "the guest did not resume";

    // The host goes away and comes back (a restarted server): the agent serves again.
    client.close();
    UniqueFd again = sandbox->connect_agent(kBootTimeout);
    int raw_again = again.release();
    auto channel_again = std::make_unique<protocol::Channel>(raw_again, raw_again);
    EXPECT_EQ(protocol::handshake(*channel_again, "host")["screen"]["width"], 1024);
    protocol::RpcClient second(std::move(channel_again));
    second.start();
    EXPECT_NO_THROW(second.call("ping", json::object(), {}, 60s));
    second.close();

    pid_t qemu = sandbox->qemu_pid();
    auto agent_socket = sandbox->agent_socket_path();
    sandbox->kill();
    EXPECT_FALSE(sandbox->alive());
    EXPECT_EQ(sandbox->state(), SandboxState::exited);
    ASSERT_TRUE(sandbox->exit_info().has_value());
    EXPECT_TRUE(sandbox->exit_info()->requested);
    EXPECT_NE(::kill(qemu, 0), 0) << "QEMU " << qemu << " still exists";
    EXPECT_FALSE(fs::exists(agent_socket));
    // The whole console: the agent logs while no host is connected, pushing boot lines out of
    // the default 4 KiB tail.
    EXPECT_NE(sandbox->log_tail(1 << 20).find("deskbox-init: handing over"), std::string::npos);
    expect_nothing_left(runtime, s);
    EXPECT_NO_THROW(sandbox->kill()) << "kill is idempotent";
}

// A host session with the agent: connect (a reconnect if one came before), handshake, ping.
std::unique_ptr<protocol::RpcClient> agent_session(MicrovmSandbox& sandbox) {
    UniqueFd fd = sandbox.connect_agent(kBootTimeout);
    int raw = fd.release();
    auto channel = std::make_unique<protocol::Channel>(raw, raw);
    json hello = protocol::handshake(*channel, "host");
    EXPECT_EQ(hello["screen"]["width"], 1024);
    auto client = std::make_unique<protocol::RpcClient>(std::move(channel));
    client->start();
    client->call("ping", json::object(), {}, 60s);
    return client;
}

// The guest's counter, or -1 while the counting loop has not written it yet.
long read_counter(protocol::RpcClient& client) {
    auto run =
        client.call("exec.run", {{"cmd", "cat /tmp/count 2>/dev/null"}, {"timeout_s", 60}}, {}, 90s)
            .result;
    std::string out = run["stdout"];
    return run["exit_code"] != 0 || out.empty() ? -1 : std::stol(out);
}

// Polls the guest's counter until it passes `above` (the guest runs slowly under TCG).
long counter_above(protocol::RpcClient& client, long above) {
    long value = read_counter(client);
    for (int i = 0; i < 100 && value <= above; ++i) {
        std::this_thread::sleep_for(200ms);
        value = read_counter(client);
    }
    return value;
}

TEST_F(MicrovmRuntimeTest, SnapshotSavesTheWholeVmAndRestoreContinuesIt) {
    require_image();
    MicrovmRuntime runtime(options_);
    auto s = spec("snap");
    auto sandbox = runtime.start_microvm(s);
    std::unique_ptr<protocol::RpcClient> client;
    try {
        client = agent_session(*sandbox);
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    auto started = client
                       ->call("exec.run",
                              {{"cmd",
                                "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv "
                                "/tmp/count.new /tmp/count; sleep 0.2; "
                                "done"},
                               {"background", true}},
                              {}, 90s)
                       .result;
    ASSERT_TRUE(started["pid"].is_number()) << started.dump();
    long before = counter_above(*client, 2);
    ASSERT_GT(before, 2) << "the counter does not count";
    client->close();

    auto save_started = std::chrono::steady_clock::now();
    std::uint64_t memory_size = 0;
    try {
        memory_size = sandbox->snapshot();
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    auto saved = std::chrono::steady_clock::now();
    const fs::path memory = sandbox->paths().memory;
    const std::string dir = sandbox_dir(s.state_root, s.id).string();
    EXPECT_TRUE(sandbox->snapshotted());
    EXPECT_EQ(sandbox->state(), SandboxState::paused);
    EXPECT_FALSE(sandbox->alive());
    EXPECT_FALSE(sandbox->exit_info().has_value());
    EXPECT_TRUE(processes_mentioning(dir).empty()) << "QEMU still runs after the snapshot";
    ASSERT_TRUE(fs::exists(memory));
    EXPECT_EQ(fs::file_size(memory), memory_size);
    EXPECT_TRUE(fs::exists(sandbox->paths().disk));
    EXPECT_THROW(sandbox->snapshot(), RuntimeError);
    EXPECT_THROW(sandbox->pause(), RuntimeError);

    auto restore_started = std::chrono::steady_clock::now();
    try {
        sandbox->restore_from_snapshot();
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    auto restored = std::chrono::steady_clock::now();
    EXPECT_TRUE(sandbox->alive());
    EXPECT_EQ(sandbox->state(), SandboxState::running);
    EXPECT_EQ(sandbox->qmp("query-status")["status"], "running");
    EXPECT_FALSE(fs::exists(memory)) << "a used snapshot no longer matches the disk";
    std::unique_ptr<protocol::RpcClient> again;
    try {
        again = agent_session(*sandbox);
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    auto reconnected = std::chrono::steady_clock::now();
    long after = read_counter(*again);
    EXPECT_GE(after, before) << "the counter started over: the guest was not restored";
    long later = counter_above(*again, after);
    EXPECT_GT(later, after) << "the counter stopped after the restore";
    std::printf(
        "[ figures  ] snapshot of a %llu MiB guest under TCG: save %.2f s, memory file %.1f MiB; "
        "restore %.2f s, + agent reconnect %.2f s; counter %ld at save, %ld after\n",
        static_cast<unsigned long long>(s.limits.memory_mb),
        std::chrono::duration<double>(saved - save_started).count(),
        static_cast<double>(memory_size) / (1 << 20),
        std::chrono::duration<double>(restored - restore_started).count(),
        std::chrono::duration<double>(reconnected - restored).count(), before, after);
    again->close();
    sandbox->kill();
    expect_nothing_left(runtime, s);
}

TEST_F(MicrovmRuntimeTest, TruncatedOrMissingSnapshotIsRefusedAndLeavesNoQemu) {
    require_image();
    MicrovmRuntime runtime(options_);
    auto s = spec("badsnap");
    auto sandbox = runtime.start_microvm(s);
    EXPECT_THROW(sandbox->restore_from_snapshot(), RuntimeError) << "nothing to restore yet";
    // Saved before the guest got far: enough to test the refusal, and quicker.
    std::uint64_t size = 0;
    try {
        size = sandbox->snapshot();
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    const fs::path memory = sandbox->paths().memory;
    const std::string dir = sandbox_dir(s.state_root, s.id).string();
    ASSERT_GT(size, 4096u);
    fs::resize_file(memory, size / 2);
    try {
        sandbox->restore_from_snapshot();
        FAIL() << "a truncated snapshot was restored";
    } catch (const RuntimeError& e) {
        std::string message = e.what();
        std::printf("[ refused  ] %s\n", message.c_str());
        EXPECT_NE(message.find(memory.string()), std::string::npos) << message;
        EXPECT_NE(message.find("QEMU"), std::string::npos) << message;
    }
    EXPECT_TRUE(processes_mentioning(dir).empty()) << "a refused restore left QEMU running";
    EXPECT_TRUE(runtime.residue(s.state_root, s.id) ==
                std::vector<std::string>{"directory " + dir});
    EXPECT_TRUE(sandbox->snapshotted());

    fs::remove(memory);
    try {
        sandbox->restore_from_snapshot();
        FAIL() << "a missing snapshot was restored";
    } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find(memory.string()), std::string::npos) << e.what();
    }
    EXPECT_TRUE(processes_mentioning(dir).empty());
    sandbox->kill();
    ASSERT_TRUE(sandbox->exit_info().has_value());
    EXPECT_TRUE(sandbox->exit_info()->requested);
    expect_nothing_left(runtime, s);
}

std::string exec_out(protocol::RpcClient& client, const std::string& cmd) {
    auto run = client.call("exec.run", {{"cmd", cmd}, {"timeout_s", 60}}, {}, 90s).result;
    EXPECT_EQ(run["exit_code"], 0) << cmd << ": " << run.dump();
    return trim_line(run.value("stdout", ""));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST_F(MicrovmRuntimeTest, TemplateSnapshotCopiesAreIndependentAndTakeTheirOwnIdentity) {
    require_image();
    MicrovmRuntime runtime(options_);
    auto base = spec("tpl");
    // One made from an older image of the same template: replaced when the new one is made.
    const fs::path stale = state_.path() / "microvm/templates/0123456789abcdef";
    fs::create_directories(stale);
    std::ofstream(stale / "snapshot.json")
        << json{{"template_rootfs", base.template_rootfs.string()}, {"generation", "older"}};
    fs::path dir;
    auto making = std::chrono::steady_clock::now();
    try {
        dir = runtime.ensure_template_snapshot(base, [](MicrovmSandbox& vm) {
            auto client = agent_session(vm);
            EXPECT_EQ(exec_out(*client, "hostname"), "deskbox") << "the throwaway's own name";
            client->close();
        });
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    double make_s = seconds_since(making);
    ASSERT_TRUE(MicrovmRuntime::template_snapshot_complete(dir));
    EXPECT_FALSE(fs::exists(stale)) << "an outdated snapshot of the template was kept";
    EXPECT_EQ(runtime.ensure_template_snapshot(
                  base, [](MicrovmSandbox&) { ADD_FAILURE() << "made a second time"; }),
              dir);
    EXPECT_TRUE(runtime.list_leftovers(base.state_root).empty()) << "the throwaway VM stayed";
    EXPECT_TRUE(processes_mentioning("template-").empty());

    auto spec_a = spec("copy-a"), spec_b = spec("copy-b");
    EXPECT_EQ(runtime.template_snapshot_dir(spec_a), dir) << "ids and hostnames are not in the key";
    auto other = spec("copy-c");
    other.limits.memory_mb = 768;
    EXPECT_NE(runtime.template_snapshot_dir(other), dir) << "memory size is in the key";

    auto restoring = std::chrono::steady_clock::now();
    auto a = runtime.start_from_template(spec_a, dir);
    double restore_s = seconds_since(restoring);
    std::unique_ptr<protocol::RpcClient> client_a, client_b;
    try {
        client_a = agent_session(*a);
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    double connected_s = seconds_since(restoring);
    auto b = runtime.start_from_template(spec_b, dir);
    try {
        client_b = agent_session(*b);
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    // Fresh identity: each copy gets its own name, the host's clock and new randomness.
    for (auto [client, id] : {std::pair{client_a.get(), spec_a.id}, {client_b.get(), spec_b.id}}) {
        auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
        auto identity = client
                            ->call("system.identity",
                                   {{"hostname", id},
                                    {"unix_time_ns", now_ns},
                                    {"seed", "AAECAwQFBgcICQoLDA0ODw=="}},
                                   {}, 60s)
                            .result;
        EXPECT_EQ(identity["hostname"], id) << identity.dump();
        EXPECT_EQ(identity["clock_set"], true) << identity.dump();
        EXPECT_EQ(exec_out(*client, "hostname"), id);
        long guest_now = std::stol(exec_out(*client, "date +%s"));
        EXPECT_NEAR(static_cast<double>(guest_now), static_cast<double>(std::time(nullptr)), 60)
            << "the guest clock was not set";
        EXPECT_EQ(exec_out(*client, "id -u"), "1000") << "the agent's children are the user";
        EXPECT_EQ(exec_out(*client, "grep CapEff /proc/self/status | tr -d '\\t'"),
                  "CapEff:0000000000000000")
            << "the agent's capabilities leaked to its children";
    }
    exec_out(*client_a, "echo only-in-a > /home/user/mine.txt && sync");
    EXPECT_EQ(exec_out(*client_a, "cat /home/user/mine.txt"), "only-in-a");
    EXPECT_EQ(exec_out(*client_b, "test -e /home/user/mine.txt && echo present || echo absent"),
              "absent");
    EXPECT_NE(exec_out(*client_a, "cat /proc/sys/kernel/random/uuid"),
              exec_out(*client_b, "cat /proc/sys/kernel/random/uuid"));
    std::printf(
        "[ figures  ] template snapshot under TCG: made in %.1f s (boot + save); a copy restored "
        "in %.2f s, its agent answering after %.2f s\n",
        make_s, restore_s, connected_s);

    client_a->close();
    a->kill();
    expect_nothing_left(runtime, spec_a);
    EXPECT_TRUE(MicrovmRuntime::template_snapshot_complete(dir)) << "copies never change it";
    // A copy stands on its own: with the template snapshot gone it still saves and restores.
    EXPECT_EQ(runtime.remove_template_snapshots(base.state_root), 1u);
    EXPECT_FALSE(fs::exists(dir));
    client_b->close();
    try {
        b->snapshot();
        b->restore_from_snapshot();
        client_b = agent_session(*b);
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    EXPECT_EQ(exec_out(*client_b, "hostname"), spec_b.id);
    client_b->close();
    b->kill();
    expect_nothing_left(runtime, spec_b);
}

TEST_F(MicrovmRuntimeTest, SavedSandboxOutlivesItsRuntimeAndIsAdoptedByTheNext) {
    require_image();
    auto s = spec("adopt");
    long before = 0;
    {
        MicrovmRuntime runtime(options_);
        auto sandbox = runtime.start_microvm(s);
        std::unique_ptr<protocol::RpcClient> client;
        try {
            client = agent_session(*sandbox);
        } catch (const std::exception& e) {
            FAIL() << e.what();
        }
        client->call("exec.run",
                     {{"cmd",
                       "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new "
                       "/tmp/count; sleep 0.2; done"},
                      {"background", true}},
                     {}, 90s);
        before = counter_above(*client, 2);
        ASSERT_GT(before, 2);
        client->close();
        try {
            sandbox->snapshot();
        } catch (const std::exception& e) {
            FAIL() << e.what();
        }
        EXPECT_TRUE(sandbox->release_snapshot());
        EXPECT_FALSE(sandbox->release_snapshot()) << "only once";
    }  // the runtime and the instance go; the saved VM stays on disk
    ASSERT_TRUE(fs::exists(sandbox_dir(s.state_root, s.id) / "memory"));

    MicrovmRuntime next(options_);
    EXPECT_TRUE(next.list_leftovers(s.state_root).empty()) << "a saved sandbox is no leftover";
    ASSERT_EQ(next.list_snapshotted(s.state_root), std::vector<std::string>{s.id});
    auto adopted = next.adopt_snapshot(s.state_root, s.id);
    EXPECT_THROW(next.adopt_snapshot(s.state_root, s.id), RuntimeError) << "adopted twice";
    EXPECT_TRUE(adopted->snapshotted());
    try {
        adopted->restore_from_snapshot();
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    std::unique_ptr<protocol::RpcClient> client;
    try {
        client = agent_session(*adopted);
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    long after = read_counter(*client);
    EXPECT_GE(after, before) << "the counter started over";
    EXPECT_GT(counter_above(*client, after), after) << "the counter does not run";
    EXPECT_EQ(exec_out(*client, "hostname"), s.hostname);
    client->close();
    adopted->kill();
    expect_nothing_left(next, s);
    EXPECT_TRUE(next.list_snapshotted(s.state_root).empty());
}

// A copy of the minimal image whose init is this checkout's: the shared image in the template
// cache was built by whichever checkout last ran images/build_microvm.py, and rebuilding it here
// would change it under everyone else's tests. The kernel unpacks concatenated cpio archives in
// order, a later file replacing an earlier one, so the shared initramfs gets a second archive
// holding only /init; the kernel and root image are the shared ones.
fs::path image_with_this_init(const fs::path& dir) {
    const fs::path shared = minimal_image().rootfs.parent_path() / "microvm";
    fs::create_directories(dir / "cpio");
    for (const char* file : {"vmlinuz", "rootfs.ext4", "build.json"})
        fs::create_symlink(shared / file, dir / file);
    fs::copy_file(kSourceDir / "images/microvm/init", dir / "cpio/init");
    fs::permissions(dir / "cpio/init", fs::perms(0755));  // as build_microvm.py packs it
    fs::copy_file(shared / "initramfs.img", dir / "initramfs.img");
    auto appended = run_process(
        {"sh", "-c", "cd \"$1\" && echo init | cpio -o -H newc -R 0:0 --quiet >> \"$2\"", "sh",
         (dir / "cpio").string(), (dir / "initramfs.img").string()},
        30s);
    if (appended.status.exit_code != 0)
        throw std::runtime_error("cpio: " + appended.err + " (apt-get install cpio)");
    return dir;
}

// A command's stdout and stderr (untrimmed), its exit code in `exit_code`.
std::string guest_output(protocol::RpcClient& client, const std::string& cmd,
                         int* exit_code = nullptr) {
    auto run = client.call("exec.run", {{"cmd", cmd}, {"timeout_s", 120}}, {}, 150s).result;
    if (exit_code) *exit_code = run.value("exit_code", -1);
    return run.value("stdout", "") + run.value("stderr", "");
}

// Issue 31: the guest's init installs the egress CA as root before it hands over, with the
// agent's own code (as deskboxd does on a container's rootfs); the guest's clients trust a TLS
// server whose certificate that CA signed, and its environment names the CA and the bundle.
TEST_F(MicrovmRuntimeTest, ItsInitInstallsTheEgressCaBeforeTheGuestRuns) {
    require_image();
    TempDir work("deskbox-microvm-egress-ca");
    deskbox::test::TestCa ca;
    try {
        options_.image_dir = image_with_this_init(work.path() / "image");
        ca = deskbox::test::make_test_ca(work.path());
    } catch (const std::exception& e) {
        FAIL() << e.what();
    }
    std::ifstream ca_in(ca.ca_pem);
    const std::string pem((std::istreambuf_iterator<char>(ca_in)), {});
    std::ofstream(agent_.path() / "egress-ca.pem") << pem;
    MicrovmRuntime runtime(options_);
    auto s = spec("egress-ca");
    s.egress_ca = true;
    auto sandbox = runtime.start_microvm(s);
    std::unique_ptr<protocol::RpcClient> client;
    try {
        client = agent_session(*sandbox);
    } catch (const std::exception& e) {
        FAIL() << e.what() << "\n" << sandbox->log_tail(1 << 16);
    }
    EXPECT_NE(sandbox->log_tail(1 << 20).find("deskbox-agent: egress CA installed (1 certificate; "
                                              "wrote /etc/ssl/certs/ca-certificates.crt"),
              std::string::npos)
        << sandbox->log_tail(1 << 16);

    const std::string bundle =
        client->call("files.read", {{"path", "/etc/ssl/certs/ca-certificates.crt"}}, {}, 60s).body;
    std::size_t copies = 0;
    for (auto at = bundle.find(pem); at != std::string::npos; at = bundle.find(pem, at + 1))
        ++copies;
    EXPECT_EQ(copies, 1u);
    EXPECT_EQ(guest_output(*client,
                           "stat -c '%U %a' /etc/ssl/certs/ca-certificates.crt "
                           "/usr/local/share/ca-certificates/deskbox-egress.crt"),
              "root 644\nroot 644\n");
    EXPECT_NE(guest_output(*client, "cat /etc/firefox/policies/policies.json")
                  .find("\"/usr/local/share/deskbox/egress-ca-1.pem\""),
              std::string::npos);
    const std::string env = guest_output(*client, "env");
    for (const char* line : {"NODE_EXTRA_CA_CERTS=/opt/deskbox/egress-ca.pem\n",
                             "DESKBOX_EGRESS_CA=/opt/deskbox/egress-ca.pem\n",
                             "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt\n",
                             "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n",
                             "CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt\n"})
        EXPECT_NE(env.find(line), std::string::npos) << line << " in\n" << env;

    // A TLS server in the guest with a certificate the CA signed; the guest's clients, without
    // the variables, on the bundle alone.
    auto read_host = [](const fs::path& file) {
        std::ifstream in(file);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    };
    for (const auto& [name, file] :
         {std::pair{"server.pem", ca.server_pem}, std::pair{"server.key", ca.server_key}})
        client->call("files.write", {{"path", std::string("/home/user/") + name}}, read_host(file),
                     60s);
    client->call("exec.run",
                 {{"cmd",
                   "cd /home/user && exec python3 -c 'import http.server, ssl\n"
                   "c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
                   "c.load_cert_chain(\"server.pem\", \"server.key\")\n"
                   "s = http.server.HTTPServer((\"127.0.0.1\", 8443), "
                   "http.server.SimpleHTTPRequestHandler)\n"
                   "s.socket = c.wrap_socket(s.socket, server_side=True)\n"
                   "s.serve_forever()' 2>/dev/null"},
                  {"background", true}},
                 {}, 60s);
    int code = -1;
    for (int i = 0; i < 120; ++i) {
        if (guest_output(*client, "curl -sk -o /dev/null https://localhost:8443/", &code).empty() &&
            code == 0)
            break;
        std::this_thread::sleep_for(500ms);
    }
    ASSERT_EQ(code, 0) << "the TLS server in the guest did not come up";
    const std::string listing = guest_output(
        *client, "env -u CURL_CA_BUNDLE -u SSL_CERT_FILE curl -sS https://localhost:8443/", &code);
    EXPECT_EQ(code, 0) << listing;
    EXPECT_NE(listing.find("server.pem"), std::string::npos) << listing;
    const std::string python = guest_output(
        *client,
        "env -u SSL_CERT_FILE -u REQUESTS_CA_BUNDLE python3 -c 'import urllib.request; "
        "print(urllib.request.urlopen(\"https://127.0.0.1:8443/\").status)'",
        &code);
    EXPECT_EQ(code, 0) << python;
    EXPECT_EQ(python, "200\n");
    client->close();
    sandbox->kill();
    expect_nothing_left(runtime, s);
}

TEST_F(MicrovmRuntimeTest, MissingImageNamesTheBuildCommandAndLeavesNothing) {
    require_image();
    TempDir empty("deskbox-microvm-noimage");
    options_.image_dir = empty.path();
    MicrovmRuntime runtime(options_);
    auto s = spec("noimage");
    try {
        runtime.start_microvm(s);
        FAIL() << "started without an image";
    } catch (const RuntimeError& e) {
        std::string message = e.what();
        EXPECT_NE(message.find("sudo images/build_microvm.py minimal"), std::string::npos)
            << message;
        EXPECT_NE(message.find("vmlinuz"), std::string::npos) << message;
    }
    EXPECT_FALSE(fs::exists(sandbox_dir(s.state_root, s.id)));
}

TEST_F(MicrovmRuntimeTest, InitFailureGivesTheConsoleTail) {
    require_image();
    options_.extra_kernel_args = "deskbox.fail=root";
    MicrovmRuntime runtime(options_);
    auto s = spec("initfail");
    auto sandbox = runtime.start_microvm(s);
    try {
        sandbox->connect_agent(kBootTimeout);
        FAIL() << "connected to an agent whose init failed";
    } catch (const RuntimeError& e) {
        std::string message = e.what();
        EXPECT_NE(message.find("the VM ended before its agent connected"), std::string::npos)
            << message;
        EXPECT_NE(message.find("the guest's init failed"), std::string::npos) << message;
        // The console's own line, not just our summary of it.
        EXPECT_NE(message.find("--- last lines of the serial console"), std::string::npos)
            << message;
        EXPECT_NE(message.find("deskbox-init: FATAL: step 'root' failed on purpose"),
                  std::string::npos)
            << message;
    }
    EXPECT_FALSE(sandbox->alive());
    ASSERT_TRUE(sandbox->exit_info().has_value());
    EXPECT_FALSE(sandbox->exit_info()->requested);
    sandbox->kill();
    expect_nothing_left(runtime, s);
}

// A guest that is not up in time: the error says where each vCPU was (a rare TCG boot stall
// leaves a console that just stops; the instruction pointers tell a spin from a wait).
TEST_F(MicrovmRuntimeTest, AnAgentTimeoutSaysWhereTheVcpusWere) {
    require_image();
    MicrovmRuntime runtime(options_);
    auto s = spec("slowboot");
    auto sandbox = runtime.start_microvm(s);
    try {
        sandbox->connect_agent(std::chrono::milliseconds(300));  // still in the kernel's boot
        FAIL() << "the agent connected within 300 ms";
    } catch (const RuntimeError& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("did not connect within"), std::string::npos) << message;
        EXPECT_NE(message.find("--- vCPUs (QEMU's info registers) ---\n  CPU#0"), std::string::npos)
            << message;
        // RIP once in long mode, EIP before (a loaded host may not have got that far).
        EXPECT_TRUE(message.find("RIP=") != std::string::npos ||
                    message.find("EIP=") != std::string::npos)
            << message;
        EXPECT_NE(message.find("HLT="), std::string::npos) << message;
    }
    sandbox->kill();
    expect_nothing_left(runtime, s);
}

TEST_F(MicrovmRuntimeTest, EntryExitCodeComesBackFromTheGuest) {
    require_image();
    MicrovmRuntime runtime(options_);
    auto s = spec("exit3");
    s.entry = {"/bin/sh", "-c", "echo bye from the entry as $(id -u); exit 3"};
    auto sandbox = runtime.start_microvm(s);
    EXPECT_THROW(sandbox->connect_agent(kBootTimeout), RuntimeError);
    ASSERT_TRUE(sandbox->exit_info().has_value());
    EXPECT_EQ(sandbox->exit_info()->exit_code, 3) << sandbox->exit_info()->reason;
    EXPECT_EQ(sandbox->exit_info()->reason, "the entry exited with code 3");
    EXPECT_NE(sandbox->log_tail().find("bye from the entry as 1000"), std::string::npos)
        << sandbox->log_tail();
    sandbox->kill();
    expect_nothing_left(runtime, s);
}

TEST_F(MicrovmRuntimeTest, QemuFailingToStartGivesItsStderr) {
    require_image();
    // A real QEMU, handed a device that does not exist.
    TempDir bin("deskbox-microvm-qemu");
    fs::path wrapper = bin.path() / "qemu";
    std::ofstream(wrapper) << "#!/bin/sh\nexec qemu-system-x86_64 \"$@\" -device no-such-device\n";
    fs::permissions(wrapper, fs::perms::owner_all);
    options_.qemu = wrapper.string();
    MicrovmRuntime runtime(options_);
    auto s = spec("badqemu");
    try {
        runtime.start_microvm(s);
        FAIL() << "QEMU started with a bad device";
    } catch (const RuntimeError& e) {
        std::string message = e.what();
        EXPECT_NE(message.find("QEMU failed to start"), std::string::npos) << message;
        EXPECT_NE(message.find("no-such-device"), std::string::npos) << message;
    }
    expect_nothing_left(runtime, s);
}

TEST_F(MicrovmRuntimeTest, LeftoverQemuOfACrashedServerIsFoundAndRemoved) {
    require_image();
    // Orphans of the "crashed server" below become our children, so we can reap them.
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    auto s = spec("leftover");
    pid_t server = ::fork();
    ASSERT_GE(server, 0);
    if (server == 0) {
        // The crashed server: starts a sandbox and dies without tearing anything down.
        try {
            MicrovmRuntime runtime(options_);
            auto sandbox = runtime.start_microvm(s).release();
            (void)sandbox;
            ::_exit(0);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "start failed: %s\n", e.what());
            ::_exit(1);
        }
    }
    int status = 0;
    ASSERT_EQ(::waitpid(server, &status, 0), server);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    MicrovmRuntime runtime(options_);
    EXPECT_EQ(runtime.list_leftovers(s.state_root), std::vector<std::string>{s.id});
    auto residue = runtime.residue(s.state_root, s.id);
    ASSERT_FALSE(residue.empty());
    EXPECT_NE(residue[0].find("QEMU process"), std::string::npos) << residue[0];
    ASSERT_EQ(processes_mentioning(sandbox_dir(s.state_root, s.id).string()).size(), 1u);
    runtime.cleanup_leftover(s.state_root, s.id);
    expect_nothing_left(runtime, s);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_F(MicrovmRuntimeTest, NetworkGoesThroughTheSandboxRouterAndNeverToTheHost) {
    require_image();
    // A listener on every address of the host: QEMU's user networking would have mapped
    // 10.0.2.2 to it. With the sandbox's own router nothing of the host is reachable.
    UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::listen(listener.get(), 1), 0);
    socklen_t len = sizeof addr;
    ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
    std::string port = std::to_string(ntohs(addr.sin_port));

    test::TestInternet internet(std::map<std::string, std::string>{{"allowed.test", "web"}});
    network::NetworkOptions net_options;
    net_options.dns_upstream = internet.dns_address();
    net_options.public_ranges = {*network::parse_ip_range(internet.web_address())};
    network::NetworkService service(net_options);
    network::SandboxNetwork::Options o;
    o.sandbox_id = "net";
    o.policy = network::NetworkPolicy::parse({{"allow", {"allowed.test"}}});
    o.kind = network::SandboxNetwork::Kind::microvm;
    auto net = service.create(o);

    MicrovmRuntime runtime(options_);
    auto s = spec("net");
    s.network = true;
    s.attachment.open_tap = [net] { return net->open_tap(); };
    s.entry = {"/bin/bash", "-c",
               "ls /sys/class/net | tr '\\n' ' '; echo; cat /etc/resolv.conf; "
               // The router accepts and then resets what the policy refuses, so a write may
               // seem to go through: that the host's listener saw nothing is the proof.
               "(echo hello from the guest >/dev/tcp/10.0.2.2/" +
                   port +
                   ") 2>/dev/null; "
                   "(echo hello >/dev/tcp/" +
                   internet.host_side_address() + "/" + port +
                   ") 2>/dev/null; "
                   // Each step says how it went, so a failing run's console tells which.
                   "echo \"resolved: $(getent ahostsv4 allowed.test | head -1)\"; "
                   "exec 3<>/dev/tcp/allowed.test/80 && printf 'GET / HTTP/1.0\\r\\nHost: "
                   "allowed.test\\r\\n\\r\\n' >&3 && cat <&3 || echo \"http failed: $?\"; "
                   "echo guest-done"};
    auto sandbox = runtime.start_microvm(s);
    EXPECT_THROW(sandbox->connect_agent(kBootTimeout), RuntimeError);  // the entry just ends
    ASSERT_TRUE(sandbox->exit_info().has_value());
    std::string console = sandbox->log_tail(65536);
    EXPECT_EQ(sandbox->exit_info()->reason, "the entry exited with code 0") << console;
    EXPECT_NE(console.find("eth0 lo"), std::string::npos) << console;
    EXPECT_NE(console.find("nameserver 10.0.2.3"), std::string::npos) << console;
    EXPECT_NE(console.find("deskbox test host " + internet.web_address() + " host=allowed.test"),
              std::string::npos)
        << console << "\n^ the guest did not get the allowed page; its network saw: "
        << net->describe()["egress"].dump();
    EXPECT_NE(console.find("guest-done"), std::string::npos) << console;
    pollfd p{listener.get(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "the guest reached the host";
    EXPECT_GE(net->totals().blocked, 2u);
    sandbox->kill();
    expect_nothing_left(runtime, s);
}

TEST_F(MicrovmRuntimeTest, KvmStartsOrFailsWithQemusOwnWords) {
    require_image();
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is not usable here";
    // Only QEMU's side: a guest under a slow nested KVM would take ages to boot. Where KVM
    // refuses `-cpu host` (this machine's nested KVM cannot set MSR 0x10a), the start must
    // fail with QEMU's message and leave nothing; `auto` then picks TCG (its probe runs the
    // same CPU model).
    options_.accelerator = Accelerator::kvm;
    MicrovmRuntime runtime(options_);
    auto s = spec("kvm");
    std::unique_ptr<MicrovmSandbox> sandbox;
    try {
        sandbox = runtime.start_microvm(s);
    } catch (const RuntimeError& e) {
        std::string message = e.what();
        EXPECT_NE(message.find("QEMU failed to start"), std::string::npos) << message;
        EXPECT_NE(message.find("qemu-system-x86_64: "), std::string::npos) << message;
        std::printf("[ note     ] KVM refused here: %s\n", message.c_str());
        expect_nothing_left(runtime, s);
        return;
    }
    EXPECT_EQ(sandbox->accelerator(), Accelerator::kvm);
    EXPECT_EQ(sandbox->qmp("query-kvm")["enabled"], true);
    sandbox->pause();
    EXPECT_EQ(sandbox->qmp("query-status")["status"], "paused");
    sandbox->kill();
    expect_nothing_left(runtime, s);
}

TEST_F(MicrovmRuntimeTest, BadSpecsNameTheField) {
    MicrovmRuntime runtime(options_);
    auto s = spec("bad");
    s.limits.memory_mb = 128;
    try {
        runtime.start_microvm(s);
        FAIL() << "128 MiB accepted";
    } catch (const SpecError& e) {
        EXPECT_EQ(e.field(), "limits.memory_mb");
    }
    s = spec("bad");
    s.entry = {"A=B", "x"};
    try {
        runtime.start_microvm(s);
        FAIL() << "entry[0] with '=' accepted";
    } catch (const SpecError& e) {
        EXPECT_EQ(e.field(), "entry[0]");
    }
    EXPECT_EQ(parse_accelerator("kvm"), Accelerator::kvm);
    EXPECT_EQ(parse_accelerator("auto"), Accelerator::auto_select);
    try {
        parse_accelerator("hvf");
        FAIL() << "hvf accepted";
    } catch (const SpecError& e) {
        EXPECT_EQ(e.field(), "accelerator");
    }
    MicrovmRuntimeOptions no_qemu;
    no_qemu.qemu.clear();
    EXPECT_THROW(MicrovmRuntime{no_qemu}, SpecError);
    EXPECT_FALSE(fs::exists(sandbox_dir(s.state_root, s.id)));
}

TEST_F(MicrovmRuntimeTest, AutoAcceleratorMeasuresOnceAndExplains) {
    if (!minimal_image().missing.empty() &&
        minimal_image().missing.find("qemu") != std::string::npos)
        GTEST_SKIP() << minimal_image().missing;
    options_.accelerator = Accelerator::auto_select;
    MicrovmRuntime runtime(options_);
    auto first = runtime.accelerator();
    std::printf("[ figures  ] accelerator: %s (%s)\n", to_string(first.accelerator),
                first.reason.c_str());
    EXPECT_FALSE(first.reason.empty());
    EXPECT_NE(first.accelerator, Accelerator::auto_select);
    if (first.accelerator == Accelerator::kvm) {
        EXPECT_LE(first.kvm_probe, first.tcg_probe);
    }
    if (::access("/dev/kvm", R_OK | W_OK) == 0) {
        // The probe ran: the TCG guest printed its marker.
        EXPECT_GT(first.tcg_probe.count(), 0) << first.reason;
    }
    auto second = runtime.accelerator();
    EXPECT_EQ(second.reason, first.reason) << "probed twice";
    EXPECT_EQ(second.tcg_probe, first.tcg_probe);
}

}  // namespace
}  // namespace deskbox::runtime
