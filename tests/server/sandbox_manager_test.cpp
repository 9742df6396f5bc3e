// SandboxManager with a FakeRuntime: no root, no guest, no network. Creates, the registry,
// limits, the timeout reaper and what a runtime without a capability answers, as the HTTP API
// sees them (the SandboxError as the front door's ApiError: status, code and field).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/api/sandbox_errors.hpp"
#include "server/runtime/fake_runtime.hpp"
#include "server/sandbox/disk_commitment.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "tests/support/eventually.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using test::eventually;

class SandboxManagerTest : public ::testing::Test {
  protected:
    ManagerOptions options() {
        ManagerOptions o;
        o.state_dir = images_.scratch() / "state";
        o.images_dir = images_.images_dir();
        o.default_template = "fake";
        o.default_runtime = "fake";
        o.default_network = network::NetworkPolicy::closed();
        o.agent_timeout = 5s;
        o.max_sandboxes = 3;
        return o;
    }
    SandboxManager& manager() {
        if (!manager_)
            manager_ = std::make_unique<SandboxManager>(options(), runtime::fake_runtimes());
        return *manager_;
    }
    // The SandboxError `call` throws, as the API answers it (none: a test failure).
    template <typename Call>
    ApiError error_of(Call&& call) {
        try {
            call();
        } catch (const SandboxError& e) {
            return to_api_error(e);
        }
        ADD_FAILURE() << "no SandboxError";
        return ApiError(0, "", "");
    }
    runtime::FakeTemplate images_;
    std::unique_ptr<SandboxManager> manager_;
};

TEST_F(SandboxManagerTest, CreateFindListAndKill) {
    auto sandbox = manager().create(json::object());
    EXPECT_EQ(sandbox->status(), SandboxStatus::running);
    EXPECT_EQ(sandbox->config().runtime_name, "fake");
    EXPECT_EQ(sandbox->config().template_name, "fake");
    EXPECT_EQ(sandbox->config().width, 320) << "the template's session resolution";
    EXPECT_EQ(sandbox->config().height, 200);
    EXPECT_EQ(sandbox->network(), nullptr) << "the fake runtime attaches no network";
    EXPECT_EQ(manager().find(sandbox->id()), sandbox);
    auto second = manager().create({{"resolution", {640, 480}}, {"metadata", {{"n", 2}}}});
    EXPECT_EQ(second->config().width, 640);
    EXPECT_NE(second->id(), sandbox->id());
    EXPECT_EQ(manager().list().size(), 2u);
    EXPECT_EQ(manager().count_by_state().at("running"), 2u);

    manager().kill(sandbox->id());
    EXPECT_EQ(sandbox->status(), SandboxStatus::killed);
    EXPECT_EQ(manager().list().size(), 1u);
    auto gone = error_of([&] { manager().find(sandbox->id()); });
    EXPECT_EQ(gone.status(), 404u);
    EXPECT_EQ(gone.code(), "not_found");
    EXPECT_EQ(error_of([&] { manager().kill(sandbox->id()); }).status(), 404u);
}

TEST_F(SandboxManagerTest, BadCreatesAre400sNamingTheFieldAndStartNothing) {
    struct Case {
        json request;
        std::string field;
    };
    const std::vector<Case> cases = {
        {json::array(), ""},
        {{{"colour", "red"}}, "colour"},
        {{{"template", 7}}, "template"},
        {{{"template", "nope"}}, "template"},
        {{{"runtime", "qemu"}}, "runtime"},
        {{{"runtime", 1}}, "runtime"},
        {{{"resolution", {32, 32}}}, "resolution"},
        {{{"resolution", {1280, 8193}}}, "resolution"},
        {{{"timeout_s", "soon"}}, "timeout_s"},
        {{{"limits", {{"memory_mb", "lots"}}}}, "limits.memory_mb"},
    };
    for (const auto& c : cases) {
        auto e = error_of([&] { manager().create(c.request); });
        EXPECT_EQ(e.status(), 400u) << c.request.dump() << ": " << e.what();
        EXPECT_EQ(e.field(), c.field) << c.request.dump() << ": " << e.what();
    }
    auto unknown = error_of([&] { manager().create({{"runtime", "qemu"}}); });
    EXPECT_STREQ(unknown.what(), "runtime: unknown runtime 'qemu' (fake)");
    EXPECT_TRUE(manager().list().empty());
    EXPECT_EQ(manager().count_by_state().at("starting"), 0u);
}

TEST_F(SandboxManagerTest, MaxSandboxesIsA429UntilOneIsKilled) {
    std::vector<std::string> ids;
    for (int i = 0; i < 3; ++i) ids.push_back(manager().create(json::object())->id());
    auto full = error_of([&] { manager().create(json::object()); });
    EXPECT_EQ(full.status(), 429u);
    EXPECT_EQ(full.code(), "too_many_sandboxes");
    EXPECT_EQ(manager().list().size(), 3u);
    manager().kill(ids[0]);
    EXPECT_NO_THROW(manager().create(json::object()));
}

// Issue 26: disk caps are sparse images, so they may promise more than is free, up to
// --disk-overcommit × the state dir's free space; past it a create is a 507 naming the field.
TEST(DiskCommitment, PromisesPastTheRatioOfFreeSpaceAreRefused) {
    EXPECT_NO_THROW(
        check_disk_commitment({.promised_mb = 100, .asked_mb = 100, .free_mb = 100, .ratio = 2}));
    try {
        check_disk_commitment({.promised_mb = 150, .asked_mb = 100, .free_mb = 100, .ratio = 2});
        ADD_FAILURE() << "250 MiB promised against 2 x 100 MiB free passed";
    } catch (const SandboxError& e) {
        EXPECT_EQ(e.fault(), SandboxFault::no_space);
        EXPECT_EQ(e.code(), "disk_overcommitted");
        EXPECT_EQ(e.field(), "limits.disk_mb");
        EXPECT_NE(std::string(e.what()).find("--disk-overcommit"), std::string::npos) << e.what();
    }
    // Off, or a sandbox without a cap: never refused.
    EXPECT_NO_THROW(check_disk_commitment({.promised_mb = 1 << 30, .asked_mb = 1, .ratio = 0}));
    EXPECT_NO_THROW(check_disk_commitment({.promised_mb = 1 << 30, .asked_mb = 0, .ratio = 2}));
}

TEST_F(SandboxManagerTest, DiskCapsOfRunningSandboxesCountAgainstFreeSpace) {
    std::filesystem::create_directories(options().state_dir);
    const std::uint64_t free_mb = free_disk_mb(options().state_dir);
    ASSERT_GT(free_mb, 1024u) << "too little free disk to test with";
    // Caps of a quarter of what is free each, and room for two and a half of them.
    const std::uint64_t cap = std::min<std::uint64_t>(free_mb / 4, 1 << 22);
    ManagerOptions o = options();
    o.disk_overcommit = 2.5 * static_cast<double>(cap) / static_cast<double>(free_mb);
    SandboxManager manager(o, runtime::fake_runtimes());
    const json request = {{"limits", {{"disk_mb", cap}}}};
    auto first = manager.create(request);
    manager.create(request);
    auto full = error_of([&] { manager.create(request); });
    EXPECT_EQ(full.status(), 507u) << full.what();
    EXPECT_EQ(full.code(), "disk_overcommitted");
    EXPECT_EQ(full.field(), "limits.disk_mb");
    EXPECT_EQ(manager.list().size(), 2u);
    manager.kill(first->id());  // its promise goes with it
    EXPECT_NO_THROW(manager.create(request));
    // The server's default: 2 x free, so a cap of the limit's size on a disk with less than
    // 2 TiB free is refused at once.
    if (free_mb < (1u << 21)) {
        ManagerOptions d = options();
        d.state_dir = images_.scratch() / "state-defaults";
        SandboxManager defaults(d, runtime::fake_runtimes());
        auto huge = error_of([&] { defaults.create({{"limits", {{"disk_mb", 1 << 22}}}}); });
        EXPECT_EQ(huge.code(), "disk_overcommitted");
    }
}

TEST_F(SandboxManagerTest, TimeoutsKillOrPauseAndSetTimeoutIsChecked) {
    auto killed = manager().create({{"timeout_s", 1}});
    auto paused = manager().create({{"timeout_s", 1}, {"on_timeout", "pause"}});
    auto kept = manager().create({{"timeout_s", 60}});
    ASSERT_TRUE(eventually([&] {
        return killed->status() == SandboxStatus::killed &&
               paused->status() == SandboxStatus::paused;
    })) << to_string(killed->status())
        << " " << to_string(paused->status());
    EXPECT_EQ(error_of([&] { manager().find(killed->id()); }).status(), 404u);
    // No snapshots in this runtime: paused in memory, and kept until a resume or kill.
    EXPECT_FALSE(paused->snapshotted());
    EXPECT_GT(paused->expires_at(), SystemClock::now() + 3600s);
    EXPECT_EQ(kept->status(), SandboxStatus::running);
    EXPECT_EQ(manager().list().size(), 2u);

    EXPECT_EQ(error_of([&] {
                  manager().set_timeout(kept->id(), {{"timeout_s", 0}});
              }).field(),
              "timeout_s");
    EXPECT_EQ(error_of([&] {
                  manager().set_timeout(kept->id(), {{"timeout_s", 5}, {"extra", 1}});
              }).field(),
              "extra");
    manager().set_timeout(kept->id(), {{"timeout_s", 1}});
    EXPECT_TRUE(eventually([&] { return kept->status() == SandboxStatus::killed; }));
}

TEST_F(SandboxManagerTest, ARuntimeWithoutSnapshotsRefusesThemClearly) {
    auto sandbox = manager().create(json::object());
    EXPECT_FALSE(sandbox->can_snapshot());
    auto refused = error_of([&] { sandbox->pause(/*snapshot=*/true); });
    EXPECT_EQ(refused.status(), 409u);
    EXPECT_EQ(refused.code(), "snapshot_unsupported");
    EXPECT_EQ(refused.field(), "snapshot");
    EXPECT_EQ(sandbox->status(), SandboxStatus::running) << "a refusal changes nothing";
    sandbox->pause();
    EXPECT_EQ(sandbox->status(), SandboxStatus::paused);
    sandbox->resume();
    EXPECT_EQ(sandbox->status(), SandboxStatus::running);
    EXPECT_FALSE(sandbox->snapshotted());
}

TEST_F(SandboxManagerTest, ARuntimeWithoutAdoptionLeavesNothingToAdoptOrClean) {
    manager();
    EXPECT_TRUE(manager().adopt_snapshots().empty());
    EXPECT_TRUE(manager().adopt_running().empty());
    EXPECT_TRUE(manager().clean_leftovers().empty());
}

TEST_F(SandboxManagerTest, APoolNeedsARuntimeWithTemplateSnapshots) {
    auto o = options();
    o.microvm_pool = {{"fake", 1}};
    try {
        SandboxManager pooled(std::move(o), runtime::fake_runtimes());
        ADD_FAILURE() << "a pool without a runtime with template snapshots was accepted";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("a pool needs a runtime with template snapshots"),
                  std::string::npos)
            << e.what();
    }
}

// The fake agent answers nothing but screen.sync: a ready command cannot run, so the create
// is a 504 naming it once the condition's timeout passes, and the sandbox is gone.
TEST_F(SandboxManagerTest, ACreateThatIsNeverReadyIsA504AndLeavesNothing) {
    auto e = error_of([&] {
        manager().create({{"ready", {{"command", {"pgrep", "xclock"}}, {"timeout_s", 1}}}});
    });
    EXPECT_EQ(e.status(), 504u);
    EXPECT_EQ(e.code(), "not_ready");
    EXPECT_EQ(e.field(), "ready");
    EXPECT_NE(std::string(e.what()).find("command [\"pgrep\",\"xclock\"] could not run after 1 s"),
              std::string::npos)
        << e.what();
    EXPECT_TRUE(manager().list().empty());
    EXPECT_EQ(manager().count_by_state().at("starting"), 0u);

    // The template's (nothing to wait for) and ready: false both answer; only a wait has a
    // ready_ms.
    auto waited = manager().create(json::object());
    EXPECT_EQ(waited->describe(false).value("ready_ms", -1), 0);
    auto skipped = manager().create({{"ready", false}});
    EXPECT_FALSE(skipped->describe(false).contains("ready_ms"));
    EXPECT_EQ(manager().list().size(), 2u);
}

TEST_F(SandboxManagerTest, OneManagerPerStateDir) {
    manager();
    try {
        SandboxManager second(options(), runtime::fake_runtimes());
        ADD_FAILURE() << "two managers on one state dir";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("in use by another deskboxd"), std::string::npos)
            << e.what();
    }
}

// Which runtimes exist is the registry's to say (the server holds no list of names): a
// default it does not have is refused at start, naming those it has.
TEST_F(SandboxManagerTest, ADefaultRuntimeTheRegistryLacksIsRefusedNamingWhatItHas) {
    ManagerOptions o = options();
    o.default_runtime = "vm";
    try {
        SandboxManager manager(o, runtime::fake_runtimes());
        ADD_FAILURE() << "a manager started with no runtime named vm";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("no runtime named 'vm' (it has fake"),
                  std::string::npos)
            << e.what();
    }
}

// Issue 26 (Also): a runtime that cannot cap a sandbox's disk (a microVM's is its own qcow2
// overlay) refuses limits.disk_mb with a 400 naming the field, and its sandboxes report no cap
// rather than the server's default. The manager asks the runtime, not its name.
class UncappedDiskRuntime final : public runtime::FakeRuntime {
  public:
    const char* name() const override { return "uncapped"; }
    bool caps_disk() const override { return false; }
};

TEST_F(SandboxManagerTest, ARuntimeThatCannotCapTheDiskRefusesDiskMbNamingTheField) {
    runtime::RuntimeRegistry runtimes = runtime::fake_runtimes();
    runtimes.add(std::make_unique<UncappedDiskRuntime>());
    SandboxManager manager(options(), std::move(runtimes));
    auto refused = error_of([&] {
        manager.create({{"runtime", "uncapped"}, {"limits", {{"disk_mb", 512}}}});
    });
    EXPECT_EQ(refused.status(), 400u);
    EXPECT_EQ(refused.field(), "limits.disk_mb");
    EXPECT_NE(std::string(refused.what()).find("uncapped runtime"), std::string::npos)
        << refused.what();
    EXPECT_TRUE(manager.list().empty());
    EXPECT_EQ(manager.create({{"runtime", "uncapped"}})->config().limits.disk_mb, 0u);
    EXPECT_EQ(manager.create({{"limits", {{"disk_mb", 512}}}})->config().limits.disk_mb, 512u)
        << "fake caps its disk";
}

}  // namespace
}  // namespace deskbox::server
