// system.identity and the agent's capability hand-off, on the real kernel.
//
// These tests run as root on a shared host, so none may change the host's hostname or clock:
// every call that could set either runs in a forked child that first enters a new UTS
// namespace and drops CAP_SYS_TIME (checked before it goes on). A validation bug therefore
// shows up as a wrong answer, never as a changed host. The clock is covered by validation and
// permission errors only.
#include <gtest/gtest.h>

#include <linux/capability.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "common/base64.hpp"
#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "guest-desktop/services/system_service.hpp"
#include "protocol/rpc.hpp"
#include "tests/support/processes.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using services::SystemService;

constexpr std::uint64_t bit(int capability) {
    return std::uint64_t{1} << capability;
}

std::string nodename() {
    utsname names{};
    if (::uname(&names) != 0) throw std::system_error(errno, std::generic_category(), "uname");
    return names.nodename;
}

std::string random_bytes(std::size_t n) {
    std::string bytes(n, '\0');
    for (std::size_t got = 0; got < n;) {
        ssize_t r = ::getrandom(bytes.data() + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
        got += static_cast<std::size_t>(r);
    }
    return bytes;
}

// The host's seed: fresh random bytes, so crediting them to this host's pool is honest.
std::string random_seed(std::size_t n) {
    return deskbox::base64_encode(random_bytes(n));
}

std::int64_t realtime_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A "CapXxx:\t<hex>" line of /proc/<pid>/status.
std::uint64_t status_caps(const std::string& status, const std::string& name) {
    std::istringstream lines(status);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind(name + ":", 0) == 0)
            return std::stoull(line.substr(name.size() + 1), nullptr, 16);
    throw std::runtime_error("no " + name + " in status");
}

struct CapSets {
    std::uint64_t effective = 0, permitted = 0, inheritable = 0;
};

CapSets get_caps() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) != 0)
        throw std::system_error(errno, std::generic_category(), "capget");
    auto join = [](std::uint32_t low, std::uint32_t high) {
        return std::uint64_t{high} << 32 | low;
    };
    return {join(data[0].effective, data[1].effective), join(data[0].permitted, data[1].permitted),
            join(data[0].inheritable, data[1].inheritable)};
}

void set_caps(const CapSets& sets) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    for (int i = 0; i < 2; ++i) {
        data[i].effective = static_cast<std::uint32_t>(sets.effective >> (32 * i));
        data[i].permitted = static_cast<std::uint32_t>(sets.permitted >> (32 * i));
        data[i].inheritable = static_cast<std::uint32_t>(sets.inheritable >> (32 * i));
    }
    if (::syscall(SYS_capset, &header, data) != 0)
        throw std::system_error(errno, std::generic_category(), "capset");
}

// Drops `capability` for good (effective and permitted) and checks it is gone.
void drop_capability(int capability) {
    CapSets sets = get_caps();
    sets.effective &= ~bit(capability);
    sets.permitted &= ~bit(capability);
    sets.inheritable &= ~bit(capability);
    set_caps(sets);
    if (services::has_effective_capability(capability))
        throw std::runtime_error("capability " + std::to_string(capability) + " still effective");
}

// Runs `body` in a forked child and returns the JSON it produced; a ServiceError it throws
// becomes {"error":{...}}, any other exception {"exception":"..."}.
json in_child(const std::function<json()>& body) {
    Pipe pipe = Pipe::create();
    pid_t pid = ::fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) {
        pipe.read.reset();
        json out;
        try {
            out = body();
        } catch (const services::ServiceError& e) {
            out = {{"error", e.to_json()}};
        } catch (const std::exception& e) {
            out = {{"exception", e.what()}};
        }
        std::string text = out.dump(-1, ' ', false, json::error_handler_t::replace);
        ::_exit(write_all(pipe.write.get(), text.data(), text.size()) ? 0 : 1);
    }
    pipe.write.reset();
    std::string text;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(pipe.read.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, static_cast<std::size_t>(n));
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    if (text.empty()) return {{"exception", "child wrote nothing"}};
    return json::parse(text);
}

// system.identity in a child with its own UTS namespace and without CAP_SYS_TIME (plus
// whatever `drop` names): {"result"|"error", "nodename_after"}.
json identity_in_child(const json& params, const std::vector<int>& drop = {}) {
    return in_child([&] {
        if (::unshare(CLONE_NEWUTS) != 0)
            throw std::system_error(errno, std::generic_category(), "unshare(CLONE_NEWUTS)");
        drop_capability(CAP_SYS_TIME);  // never the host's clock, whatever the service does
        for (int capability : drop) drop_capability(capability);
        json out;
        try {
            out["result"] = SystemService().identity(params);
        } catch (const services::ServiceError& e) {
            out["error"] = e.to_json();
        }
        out["nodename_after"] = nodename();
        return out;
    });
}

void expect_error(const json& out, const std::string& code, const std::string& field,
                  const std::string& message_part) {
    ASSERT_TRUE(out.contains("error")) << out.dump();
    EXPECT_EQ(out["error"]["code"], code) << out.dump();
    EXPECT_EQ(out["error"].value("field", ""), field) << out.dump();
    EXPECT_NE(out["error"].value("message", "").find(message_part), std::string::npos)
        << "message lacks '" << message_part << "': " << out.dump();
}

class SystemIdentity : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!services::has_effective_capability(CAP_SYS_ADMIN))
            GTEST_SKIP() << "needs root (CAP_SYS_ADMIN) for UTS namespaces";
        host_name_ = nodename();
    }
    // Every test: the host's own hostname never changes.
    void TearDown() override {
        if (!host_name_.empty()) {
            EXPECT_EQ(nodename(), host_name_);
        }
    }
    std::string host_name_;
};

TEST_F(SystemIdentity, SetsTheHostnameInItsNamespace) {
    auto out = identity_in_child({{"hostname", "sandbox-7.example"}});
    ASSERT_TRUE(out.contains("result")) << out.dump();
    EXPECT_EQ(out["result"],
              json({{"hostname", "sandbox-7.example"}, {"clock_set", false}, {"seed", "none"}}));
    EXPECT_EQ(out["nodename_after"], "sandbox-7.example");

    // The bounds of the length rule are accepted.
    std::string longest(64, 'h');
    out = identity_in_child({{"hostname", longest}});
    ASSERT_TRUE(out.contains("result")) << out.dump();
    EXPECT_EQ(out["result"]["hostname"], longest);
    out = identity_in_child({{"hostname", "A"}});
    ASSERT_TRUE(out.contains("result")) << out.dump();
    EXPECT_EQ(out["nodename_after"], "A");
}

TEST_F(SystemIdentity, HostnameAndSeedTogether) {
    auto out = identity_in_child({{"hostname", "restored-1"}, {"seed", random_seed(64)}});
    ASSERT_TRUE(out.contains("result")) << out.dump();
    EXPECT_EQ(out["result"]["hostname"], "restored-1");
    EXPECT_EQ(out["result"]["seed"], "credited");
    EXPECT_EQ(out["result"]["clock_set"], false);
}

TEST_F(SystemIdentity, EmptyParamsChangeNothing) {
    for (const json& params : {json::object(), json()}) {
        auto result = SystemService().identity(params);
        EXPECT_EQ(result, json({{"hostname", host_name_}, {"clock_set", false}, {"seed", "none"}}));
    }
}

TEST_F(SystemIdentity, SeedIsCreditedWithCapSysAdmin) {
    // Seed only: nothing here touches hostname or clock, so it runs in this process.
    for (std::size_t size : {16, 100, 512}) {
        auto result = SystemService().identity({{"seed", random_seed(size)}});
        EXPECT_EQ(result["seed"], "credited") << size;
        EXPECT_EQ(result["hostname"], host_name_);
        EXPECT_EQ(result["clock_set"], false);
    }
}

TEST_F(SystemIdentity, SeedIsMixedWithoutCapSysAdmin) {
    auto out = identity_in_child({{"seed", random_seed(32)}}, {CAP_SYS_ADMIN});
    ASSERT_TRUE(out.contains("result")) << out.dump();
    EXPECT_EQ(out["result"]["seed"], "mixed");
}

TEST_F(SystemIdentity, HostnameWithoutCapSysAdminIsPermissionDenied) {
    auto out = identity_in_child({{"hostname", "nope"}}, {CAP_SYS_ADMIN});
    expect_error(out, "permission_denied", "hostname", "CAP_SYS_ADMIN");
    EXPECT_EQ(out["nodename_after"], host_name_);
}

TEST_F(SystemIdentity, ClockWithoutCapSysTimeIsPermissionDenied) {
    // identity_in_child always drops CAP_SYS_TIME; the value is "now" all the same.
    auto out = identity_in_child({{"unix_time_ns", realtime_ns()}});
    expect_error(out, "permission_denied", "unix_time_ns", "CAP_SYS_TIME");
}

TEST_F(SystemIdentity, NothingIsAppliedWhenACapabilityIsMissing) {
    // The hostname could be set, the clock cannot: the hostname must stay as it was.
    auto out = identity_in_child(
        {{"hostname", "half-done"}, {"unix_time_ns", realtime_ns()}, {"seed", random_seed(16)}});
    expect_error(out, "permission_denied", "unix_time_ns", "CAP_SYS_TIME");
    EXPECT_EQ(out["nodename_after"], host_name_);
}

struct BadCase {
    json params;
    std::string field;
    std::string message_part;
};

TEST_F(SystemIdentity, BadParamsAreRejectedBeforeAnythingIsApplied) {
    std::string seed16 = random_seed(16);
    std::string unpadded = seed16.substr(0, seed16.find('='));
    std::string with_newline = random_seed(48);
    with_newline.insert(32, "\n");
    std::string url_safe = deskbox::base64_encode(std::string(18, '\xfb'));  // "+7++..."
    for (char& c : url_safe)
        if (c == '+') c = '-';
    const std::vector<BadCase> cases = {
        {json::array({1, 2}), "params", "must be an object"},
        {{{"hostnme", "x"}}, "hostnme", "unknown parameter"},
        {{{"hostname", "ok"}, {"clock", 1}}, "clock", "unknown parameter"},
        {{{"hostname", 42}}, "hostname", "must be a string"},
        {{{"hostname", ""}}, "hostname", "must be 1 to 64 characters, not 0"},
        {{{"hostname", std::string(65, 'a')}}, "hostname", "must be 1 to 64 characters, not 65"},
        {{{"hostname", "under_score"}}, "hostname", "not '_'"},
        {{{"hostname", "x/y"}}, "hostname", "not '/'"},
        {{{"hostname", "has space"}}, "hostname", "not byte 32"},
        {{{"hostname", "a\nb"}}, "hostname", "not byte 10"},
        {{{"hostname", std::string("a\0b", 3)}}, "hostname", "not byte 0"},
        {{{"hostname", "caf\xc3\xa9"}}, "hostname", "not byte 195"},
        {{{"unix_time_ns", "1700000000000000000"}}, "unix_time_ns", "must be an integer"},
        {{{"unix_time_ns", 1.7e18}}, "unix_time_ns", "must be an integer"},
        {{{"unix_time_ns", true}}, "unix_time_ns", "must be an integer"},
        {{{"unix_time_ns", 1'700'000'000}}, "unix_time_ns", "must be between"},  // seconds
        {{{"unix_time_ns", -1}}, "unix_time_ns", "must be between"},
        {{{"unix_time_ns", std::numeric_limits<std::uint64_t>::max()}},
         "unix_time_ns",
         "must be between"},
        {{{"seed", 42}}, "seed", "must be a string"},
        {{{"seed", "not base64!"}}, "seed", "must be base64"},
        {{{"seed", unpadded}}, "seed", "must be base64"},
        {{{"seed", with_newline}}, "seed", "must be base64"},
        {{{"seed", url_safe}}, "seed", "must be base64"},
        {{{"seed", "AAAA=AAA"}}, "seed", "must be base64"},
        {{{"seed", "===="}}, "seed", "must be base64"},
        {{{"seed", ""}}, "seed", "must be base64"},
        {{{"seed", "AAAA"}}, "seed", "must decode to 16 to 512 bytes, not 3"},
        {{{"seed", random_seed(15)}}, "seed", "not 15"},
        {{{"seed", random_seed(513)}}, "seed", "not 513"},
        // A valid field next to a bad one: still nothing applied.
        {{{"hostname", "valid-name"}, {"seed", "bad!"}}, "seed", "must be base64"},
        {{{"hostname", "valid-name"}, {"unix_time_ns", 5}}, "unix_time_ns", "must be between"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.params.dump(-1, ' ', true));
        auto out = identity_in_child(c.params);
        expect_error(out, "bad_request", c.field, c.message_part);
        EXPECT_EQ(out["nodename_after"], host_name_);
    }
}

// --- the agent's capability hand-off

TEST(ClearInheritableCapabilities, IsANoOpWithoutCapabilities) {
    auto out = in_child([] {
        // As in a container: an unprivileged uid with no capabilities at all.
        if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
            throw std::system_error(errno, std::generic_category(), "setresuid");
        std::string before = read_text("/proc/self/status");
        services::clear_inheritable_capabilities();
        return json{{"before", before}, {"after", read_text("/proc/self/status")}};
    });
    ASSERT_TRUE(out.contains("after")) << out.dump();
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapAmb"}) {
        EXPECT_EQ(status_caps(out["before"], set), 0u) << set;
        EXPECT_EQ(status_caps(out["after"], set), 0u) << set;
    }
}

TEST(ClearInheritableCapabilities, LeavesOwnSetsAloneWhenNothingIsInheritable) {
    auto out = in_child([] {
        std::string before = read_text("/proc/self/status");
        services::clear_inheritable_capabilities();
        return json{{"before", before}, {"after", read_text("/proc/self/status")}};
    });
    ASSERT_TRUE(out.contains("after")) << out.dump();
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapAmb", "CapBnd"})
        EXPECT_EQ(status_caps(out["after"], set), status_caps(out["before"], set)) << set;
}

TEST(ClearInheritableCapabilities, KeepsThemForItselfButNotForWhatItRuns) {
    constexpr std::uint64_t kept = bit(CAP_SYS_TIME) | bit(CAP_SYS_ADMIN);
    auto out = in_child([] {
        // What setpriv does in the microVM's init: an unprivileged uid holding exactly these
        // two as ambient capabilities.
        if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
            ::setresuid(65534, 65534, 65534) != 0)
            throw std::system_error(errno, std::generic_category(), "setresuid with keepcaps");
        set_caps({kept, kept, kept});
        for (int capability : {CAP_SYS_TIME, CAP_SYS_ADMIN})
            if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, capability, 0, 0) != 0)
                throw std::system_error(errno, std::generic_category(), "PR_CAP_AMBIENT_RAISE");
        auto spawned_status = [] {
            auto r = run_process({"/bin/cat", "/proc/self/status"}, 10s);
            if (r.status.exit_code != 0) throw std::runtime_error("cat failed: " + r.err);
            return r.out;
        };
        json out;
        out["spawned_before"] = spawned_status();
        services::clear_inheritable_capabilities();
        out["self_after"] = read_text("/proc/self/status");
        out["spawned_after"] = spawned_status();
        return out;
    });
    ASSERT_TRUE(out.contains("spawned_after")) << out.dump();
    // Without the cleanup, a spawned program inherits both (so this test can tell).
    EXPECT_EQ(status_caps(out["spawned_before"], "CapAmb"), kept);
    EXPECT_EQ(status_caps(out["spawned_before"], "CapEff"), kept);
    // After it, the agent itself keeps them...
    EXPECT_EQ(status_caps(out["self_after"], "CapEff"), kept);
    EXPECT_EQ(status_caps(out["self_after"], "CapPrm"), kept);
    EXPECT_EQ(status_caps(out["self_after"], "CapInh"), 0u);
    EXPECT_EQ(status_caps(out["self_after"], "CapAmb"), 0u);
    // ...and what it runs has none.
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapAmb"})
        EXPECT_EQ(status_caps(out["spawned_after"], set), 0u) << set;
}

// --- end to end through the agent binary

// The agent as the microVM's init starts it (unprivileged uid, ambient capabilities), in a UTS
// namespace of its own, over a Unix socket. Only CAP_SYS_ADMIN is handed over, never
// CAP_SYS_TIME: this agent shares the host's clock.
class ConfinedAgent {
  public:
    ConfinedAgent() {
        if (::chown(dir_.path().c_str(), kUid, kUid) != 0)
            throw std::system_error(errno, std::generic_category(), "chown");
        socket_ = (dir_.path() / "agent.sock").string();
        SpawnOptions o;
        o.argv = {"unshare",
                  "--uts",
                  "setpriv",
                  "--reuid=" + std::to_string(kUid),
                  "--regid=" + std::to_string(kUid),
                  "--clear-groups",
                  "--no-new-privs",
                  "--inh-caps=-all,+sys_admin",
                  "--ambient-caps=+sys_admin",
                  "--bounding-set=-all,+sys_admin",
                  deskbox::test_paths::kAgent,
                  "--channel",
                  "unix-listen:" + socket_,
                  "--size",
                  "640x480",
                  "--log-dir",
                  dir_.path().string()};
        o.env_overrides = {{"HOME", dir_.path().string()}, {"LANG", "C.UTF-8"}};
        o.stderr_file = (dir_.path() / "agent.log").string();
        process_ = ChildProcess::spawn(o);
    }
    ~ConfinedAgent() { process_.terminate(std::chrono::seconds(10)); }

    std::unique_ptr<protocol::RpcClient> connect() {
        for (int attempt = 0; attempt < 300; ++attempt) {
            UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
            sockaddr_un addr{};
            addr.sun_family = AF_UNIX;
            std::strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
            if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
                int raw = fd.release();
                auto channel = std::make_unique<protocol::Channel>(raw, raw);
                protocol::handshake(*channel, "host");
                auto client = std::make_unique<protocol::RpcClient>(std::move(channel));
                client->start();
                return client;
            }
            if (!process_.running()) break;
            std::this_thread::sleep_for(50ms);
        }
        ADD_FAILURE() << "agent did not come up; log:\n" << log();
        return nullptr;
    }
    std::string log() const { return read_text((dir_.path() / "agent.log").string()); }
    pid_t pid() const { return process_.pid(); }

    static constexpr uid_t kUid = 65534;  // nobody

  private:
    TempDir dir_{"deskbox-identity-test"};
    std::string socket_;
    ChildProcess process_;
};

TEST(AgentIdentity, KeepsCapabilitiesToItselfAndAppliesTheIdentity) {
    if (!services::has_effective_capability(CAP_SYS_ADMIN)) GTEST_SKIP() << "needs root";
    const std::string host_name = nodename();
    ConfinedAgent agent;
    auto client = agent.connect();
    ASSERT_TRUE(client);

    // The agent holds CAP_SYS_ADMIN and nothing it could pass on.
    std::string own = read_text("/proc/" + std::to_string(agent.pid()) + "/status");
    EXPECT_EQ(status_caps(own, "CapEff"), bit(CAP_SYS_ADMIN)) << own;
    EXPECT_EQ(status_caps(own, "CapPrm"), bit(CAP_SYS_ADMIN));
    EXPECT_EQ(status_caps(own, "CapInh"), 0u);
    EXPECT_EQ(status_caps(own, "CapAmb"), 0u);
    // Its desktop (Xvfb, window manager) and the commands it runs have no capabilities.
    auto children = testing::children_of(agent.pid());
    EXPECT_FALSE(children.empty());
    for (pid_t child : children) {
        std::string status = read_text("/proc/" + std::to_string(child) + "/status");
        if (status.empty()) continue;  // exited meanwhile
        EXPECT_EQ(status_caps(status, "CapEff"), 0u) << status;
        EXPECT_EQ(status_caps(status, "CapAmb"), 0u) << status;
    }
    auto caps = client->call("exec.run", {{"argv", {"cat", "/proc/self/status"}}});
    ASSERT_EQ(caps.result["exit_code"], 0) << caps.result.dump();
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapAmb"})
        EXPECT_EQ(status_caps(caps.result["stdout"], set), 0u) << set;

    auto reply =
        client->call("system.identity", {{"hostname", "restored-7"}, {"seed", random_seed(32)}});
    EXPECT_EQ(reply.result,
              json({{"hostname", "restored-7"}, {"clock_set", false}, {"seed", "credited"}}));
    auto seen = client->call("exec.run", {{"argv", {"hostname"}}});
    EXPECT_EQ(seen.result["stdout"], "restored-7\n");

    try {
        client->call("system.identity", {{"unix_time_ns", realtime_ns()}});
        ADD_FAILURE() << "setting the clock without CAP_SYS_TIME succeeded";
    } catch (const protocol::RpcError& e) {
        EXPECT_EQ(e.code(), "permission_denied");
        EXPECT_EQ(e.field(), "unix_time_ns");
        EXPECT_NE(std::string(e.what()).find("CAP_SYS_TIME"), std::string::npos) << e.what();
    }
    try {
        client->call("system.identity", {{"hostname", "bad name"}});
        ADD_FAILURE() << "a hostname with a space was accepted";
    } catch (const protocol::RpcError& e) {
        EXPECT_EQ(e.code(), "bad_request");
        EXPECT_EQ(e.field(), "hostname");
    }
    EXPECT_EQ(client->call("exec.run", {{"argv", {"hostname"}}}).result["stdout"], "restored-7\n");
    EXPECT_EQ(nodename(), host_name);
}

}  // namespace
}  // namespace deskbox
