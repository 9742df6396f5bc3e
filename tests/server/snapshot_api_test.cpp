// Named snapshots and forks through deskboxd with real containers: a snapshot holds what the
// sandbox wrote (deleted files and replaced directories included) and outlives the sandbox and
// the server; creates from it start where it was, again and again; a fork is N copies at
// once; auto_resume wakes a sandbox its timeout paused on the next request; bad input is a
// clear error and nothing stays behind.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "tests/server/deskboxd_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

std::string create(Server& s, json body) {
    body["network"] = false;
    auto created = s.post("/v1/sandboxes", body);
    EXPECT_EQ(created.status, 201u) << created.body << s.log();
    return created.js().value("id", "");
}

std::string error_code(const Answer& a) {
    return a.js()["error"].value("code", "");
}

std::size_t entries_under(const std::filesystem::path& dir) {
    std::size_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++n;
    return n;
}

// What a sandbox wrote, as one line to compare: a file's checksum, a deleted template file, a
// directory replaced by one of the sandbox's own (overlay's opaque mark), a symlink, owners.
constexpr const char* kWrites =
    "head -c 300000 /dev/urandom > /home/user/blob && echo saved > /home/user/note && "
    "rm /home/user/.bash_logout && rm -rf /home/user/.cache/fontconfig && "
    "mkdir /home/user/.cache/fontconfig && echo mine > /home/user/.cache/fontconfig/only && "
    "ln -s /home/user/note /home/user/link";
constexpr const char* kReadBack =
    "sha256sum /home/user/blob | cut -c1-16; cat /home/user/note; "
    "test -e /home/user/.bash_logout && echo logout-back || echo logout-gone; "
    "cat /home/user/.cache/fontconfig/only; "
    "test -e /home/user/.cache/fontconfig/CACHEDIR.TAG && echo tag-back || echo tag-gone; "
    "readlink /home/user/link; stat -c %U /home/user/blob";

TEST(Snapshots, HoldWhatASandboxWroteAndStartSandboxesFromItRepeatedly) {
    REQUIRE_TEMPLATE();
    TempDir state("deskboxd-snapshots");
    std::string source, expected, restored;
    {
        Server s({}, state.path());
        source = create(s, {{"metadata", {{"team", "qa"}}}, {"env", {{"MODE", "snap"}}}});
        ASSERT_EQ(run(s, source, kWrites + std::string(" && echo ok")), "ok\n");
        expected = run(s, source, kReadBack);
        ASSERT_NE(expected.find("saved\nlogout-gone\nmine\ntag-gone\n/home/user/note\nuser\n"),
                  std::string::npos)
            << expected;

        auto made = s.post("/v1/sandboxes/" + source + "/snapshots",
                           {{"name", "base"}, {"metadata", {{"purpose", "test"}}}});
        ASSERT_EQ(made.status, 201u) << made.body << s.log();
        EXPECT_EQ(made.js()["kind"], "filesystem");
        EXPECT_EQ(made.js()["runtime"], "container");
        EXPECT_EQ(made.js()["template"], "minimal");
        EXPECT_EQ(made.js()["source_sandbox"], source);
        EXPECT_EQ(made.js()["metadata"]["purpose"], "test");
        EXPECT_GT(made.js()["size_bytes"].get<long long>(), 300000);
        EXPECT_FALSE(made.js().contains("env")) << "settings stay private: " << made.body;
        // The source runs on unchanged.
        EXPECT_EQ(s.get("/v1/sandboxes/" + source).js()["state"], "running");
        EXPECT_EQ(run(s, source, kReadBack), expected);

        // Listed and inspected; the name is taken; bad names and sources are clear errors.
        auto listed = s.get("/v1/snapshots").js();
        ASSERT_EQ(listed["snapshots"].size(), 1u) << listed.dump();
        EXPECT_EQ(listed["snapshots"][0]["name"], "base");
        EXPECT_EQ(s.get("/v1/snapshots/base").js()["source_sandbox"], source);
        auto taken = s.post("/v1/sandboxes/" + source + "/snapshots", {{"name", "base"}});
        EXPECT_EQ(taken.status, 409u);
        EXPECT_EQ(error_code(taken), "snapshot_exists");
        for (const json& bad :
             {json{{"name", "../etc"}}, json{{"name", 5}}, json::object(),
              json{{"name", "ok"}, {"metadata", "x"}}, json{{"name", std::string(200, 'a')}}}) {
            auto refused = s.post("/v1/sandboxes/" + source + "/snapshots", bad);
            EXPECT_EQ(refused.status, 400u) << bad.dump() << " " << refused.body;
        }
        EXPECT_EQ(s.post("/v1/sandboxes/sb-000000000000/snapshots", {{"name", "x"}}).status, 404u);
        EXPECT_EQ(s.get("/v1/snapshots/nope").status, 404u);
        EXPECT_EQ(s.get("/v1/snapshots/..%2Fstate").status, 404u);
        EXPECT_EQ(s.del("/v1/snapshots/nope").status, 404u);

        // A create from it keeps the source's settings and what the sandbox wrote.
        auto copy = s.post("/v1/sandboxes", {{"snapshot", "base"}});
        ASSERT_EQ(copy.status, 201u) << copy.body << s.log();
        restored = copy.js()["id"];
        EXPECT_EQ(copy.js()["from_snapshot"], "base");
        EXPECT_EQ(run(s, restored, kReadBack), expected);
        EXPECT_EQ(run(s, restored, "printenv MODE"), "snap\n");
        EXPECT_EQ(run(s, restored, "hostname"), restored + "\n") << "its own name";
        // What it fixes cannot be asked for again; what it does not, can.
        auto fixed = s.post("/v1/sandboxes", {{"snapshot", "base"}, {"template", "desktop"}});
        EXPECT_EQ(fixed.status, 400u) << fixed.body;
        EXPECT_EQ(fixed.js()["error"]["field"], "template");
        EXPECT_EQ(s.post("/v1/sandboxes", {{"snapshot", "base"}, {"resolution", {800, 600}}})
                      .js()["error"]["field"],
                  "resolution");
        EXPECT_EQ(s.post("/v1/sandboxes", {{"snapshot", "nope"}}).status, 404u);
        EXPECT_EQ(s.post("/v1/sandboxes", {{"snapshot", 7}}).status, 400u);
        const std::string other = create(s, {{"snapshot", "base"}, {"env", {{"MODE", "new"}}}});
        EXPECT_EQ(run(s, other, "printenv MODE"), "new\n");
        EXPECT_EQ(s.del("/v1/sandboxes/" + other).status, 200u);

        // Snapshot of a snapshot's sandbox, five generations deep: each adds a line.
        std::string parent = restored;
        for (int generation = 1; generation <= 5; ++generation) {
            run(s, parent, "echo " + std::to_string(generation) + " >> /home/user/generations");
            const std::string name = "gen" + std::to_string(generation);
            ASSERT_EQ(s.post("/v1/sandboxes/" + parent + "/snapshots", {{"name", name}}).status,
                      201u);
            std::string child = create(s, {{"snapshot", name}});
            if (parent != restored) {
                EXPECT_EQ(s.del("/v1/sandboxes/" + parent).status, 200u);
            }
            parent = child;
        }
        EXPECT_EQ(run(s, parent, "tr '\\n' ' ' < /home/user/generations"), "1 2 3 4 5 ");
        EXPECT_EQ(run(s, parent, kReadBack), expected);
        EXPECT_EQ(s.del("/v1/sandboxes/" + parent).status, 200u);
        for (int generation = 1; generation <= 5; ++generation)
            EXPECT_EQ(s.del("/v1/snapshots/gen" + std::to_string(generation)).status, 200u);
        s.kill_hard();
    }
    {
        // The next server has the snapshot, and the sandbox started from it.
        Server restarted({}, state.path());
        ASSERT_EQ(restarted.get("/v1/snapshots").js()["snapshots"].size(), 1u);
        EXPECT_EQ(run(restarted, restored, kReadBack), expected);
        EXPECT_EQ(restarted.get("/v1/sandboxes/" + restored).js()["from_snapshot"], "base");
        const std::string later = create(restarted, {{"snapshot", "base"}});
        EXPECT_EQ(run(restarted, later, kReadBack), expected);
        // Deleting it does not touch the sandboxes started from it.
        auto deleted = restarted.del("/v1/snapshots/base");
        EXPECT_EQ(deleted.status, 200u) << deleted.body;
        EXPECT_EQ(deleted.js()["deleted"], "base");
        EXPECT_EQ(run(restarted, later, "cat /home/user/note"), "saved\n");
        EXPECT_EQ(restarted.post("/v1/sandboxes", {{"snapshot", "base"}}).status, 404u);
        for (const auto& id : {source, restored, later})
            EXPECT_EQ(restarted.del("/v1/sandboxes/" + id).status, 200u);
        EXPECT_EQ(entries_under(restarted.state() / "snapshots"), 0u) << "nothing left";
        EXPECT_EQ(entries_under(restarted.state() / "sandboxes"), 0u);
    }
}

TEST(Snapshots, AForkIsNCopiesStartedAtOnce) {
    REQUIRE_TEMPLATE();
    Server s({"--max-sandboxes", "4"});
    const std::string source = create(s, {});
    run(s, source, "echo forked > /home/user/state");
    auto forked = s.post("/v1/sandboxes/" + source + "/fork", {{"count", 2}});
    ASSERT_EQ(forked.status, 201u) << forked.body << s.log();
    EXPECT_EQ(forked.js()["kind"], "filesystem");
    ASSERT_EQ(forked.js()["sandboxes"].size(), 2u) << forked.body;
    std::vector<std::string> copies;
    const json answer = forked.js();
    for (const auto& sandbox : answer["sandboxes"]) {
        copies.push_back(sandbox["id"]);
        EXPECT_TRUE(sandbox.contains("control_token")) << "each copy's own tokens";
        EXPECT_EQ(run(s, copies.back(), "cat /home/user/state"), "forked\n");
    }
    EXPECT_NE(copies[0], copies[1]);
    // Copies are apart: one's writes are not the other's.
    run(s, copies[0], "echo changed > /home/user/state");
    EXPECT_EQ(run(s, copies[1], "cat /home/user/state"), "forked\n");
    EXPECT_EQ(run(s, source, "cat /home/user/state"), "forked\n");
    // Over the server's capacity: all or none, answered as a create over it is.
    auto over = s.post("/v1/sandboxes/" + source + "/fork", {{"count", 2}});
    EXPECT_EQ(over.status, 429u) << over.body;
    EXPECT_EQ(error_code(over), "too_many_sandboxes");
    EXPECT_EQ(s.get("/v1/sandboxes").js()["sandboxes"].size(), 3u);
    for (const json& bad : {json{{"count", 0}}, json{{"count", 17}}, json{{"count", "2"}},
                            json{{"count", 1}, {"bogus", true}}})
        EXPECT_EQ(s.post("/v1/sandboxes/" + source + "/fork", bad).status, 400u) << bad.dump();
    EXPECT_EQ(s.post("/v1/sandboxes/sb-000000000000/fork", json::object()).status, 404u);
    for (const auto& id : copies) EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
    EXPECT_EQ(s.del("/v1/sandboxes/" + source).status, 200u);
    EXPECT_EQ(entries_under(s.state() / "snapshots"), 0u) << "a fork's copy is not kept";
}

TEST(Snapshots, AutoResumeWakesASandboxItsTimeoutPausedOnTheNextRequest) {
    REQUIRE_TEMPLATE();
    Server s;
    // 3 s: long enough that the woken sandbox is not paused again before the test looks.
    const std::string id = create(s, {{"timeout_s", 3}, {"auto_resume", true}});
    run(s, id, "echo kept > /tmp/state");
    const std::string base = "/v1/sandboxes/" + id;
    ASSERT_TRUE(eventually([&] { return s.get(base).js()["state"] == "paused"; }, 30s))
        << s.get(base).body;
    // Looking does not wake it.
    auto described = s.get(base).js();
    EXPECT_EQ(described["paused_reason"], "timeout");
    EXPECT_EQ(described["auto_resume"], true);
    auto listed = s.get("/v1/sandboxes").js();
    ASSERT_EQ(listed["sandboxes"].size(), 1u);
    EXPECT_EQ(listed["sandboxes"][0]["state"], "paused");
    // A command does, and finds it as it was; the timeout starts again.
    EXPECT_EQ(run(s, id, "cat /tmp/state"), "kept\n");
    ASSERT_EQ(s.post(base + "/timeout", {{"timeout_s", 600}}).status, 200u);
    auto woken = s.get(base).js();
    EXPECT_EQ(woken["state"], "running") << woken.dump();
    EXPECT_FALSE(woken.contains("paused_reason"));
    // A pause asked for is not undone by the next request.
    ASSERT_EQ(s.post(base + "/pause", json::object()).status, 200u);
    EXPECT_EQ(s.get(base).js()["paused_reason"], "request");
    EXPECT_EQ(s.post(base + "/commands", {{"cmd", "true"}}).status, 409u);
    // A resume starts the timeout again (the pause left it the longest deadline): without
    // auto_resume, the timeout pauses it again.
    const std::string plain = create(s, {{"timeout_s", 2}, {"on_timeout", "pause"}});
    const std::string plain_base = "/v1/sandboxes/" + plain;
    ASSERT_TRUE(eventually([&] { return s.get(plain_base).js()["state"] == "paused"; }, 30s));
    EXPECT_EQ(s.post(plain_base + "/commands", {{"cmd", "true"}}).status, 409u) << "no wake";
    ASSERT_EQ(s.post(plain_base + "/resume", json::object()).status, 200u);
    EXPECT_TRUE(eventually([&] { return s.get(plain_base).js()["state"] == "paused"; }, 30s))
        << s.get(plain_base).body;
    EXPECT_EQ(s.del(plain_base).status, 200u);
    // auto_resume needs a timeout that pauses.
    auto refused = s.post("/v1/sandboxes", {{"auto_resume", true}, {"on_timeout", "kill"}});
    EXPECT_EQ(refused.status, 400u) << refused.body;
    EXPECT_EQ(refused.js()["error"]["field"], "auto_resume");
    EXPECT_EQ(s.post("/v1/sandboxes", {{"auto_resume", "yes"}}).status, 400u);
    EXPECT_EQ(s.del(base).status, 200u);
}

// Pause and resume twenty times, and timeout pauses woken by requests: the files written
// before each (fsync'd or not) are there after it, and a counter that runs throughout has gone
// on, never back.
TEST(Snapshots, RepeatedPausesAndWakesLoseNothing) {
    REQUIRE_TEMPLATE();
    Server s;
    const std::string id = create(s, {{"timeout_s", 600}});
    const std::string base = "/v1/sandboxes/" + id;
    ASSERT_EQ(s.post(base + "/commands", {{"cmd",
                                           "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; "
                                           "mv /tmp/count.new /tmp/count; sleep 0.05; done"},
                                          {"background", true}})
                  .status,
              200u);
    // The counter is renamed into place: a read never sees the file truncated mid-write.
    auto count = [&] {
        const std::string out = run(s, id, "cat /tmp/count");
        return out.empty() ? -1L : std::stol(out);
    };
    ASSERT_TRUE(eventually([&] { return count() > 0; }, 10s));
    std::string sums;
    long last = 0;
    for (int cycle = 0; cycle < 20; ++cycle) {
        sums = write_cycle_files(s, id, cycle);
        ASSERT_EQ(s.post(base + "/pause", json::object()).status, 200u) << cycle;
        ASSERT_EQ(s.post(base + "/resume", json::object()).status, 200u) << cycle << s.log();
        EXPECT_EQ(cycle_sums(s, id), sums) << cycle;
        const long now = count();
        EXPECT_GE(now, last) << "the counter went back at cycle " << cycle;
        last = now;
    }
    EXPECT_TRUE(eventually([&] { return count() > last; }, 10s)) << "it stopped counting";

    // Timeout pauses, each woken by the next command.
    ASSERT_EQ(s.del(base).status, 200u);
    const std::string woken = create(s, {{"timeout_s", 2}, {"auto_resume", true}});
    ASSERT_EQ(s.post("/v1/sandboxes/" + woken + "/commands",
                     {{"cmd",
                       "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new "
                       "/tmp/count; sleep 0.05; done"},
                      {"background", true}})
                  .status,
              200u);
    last = 0;
    for (int cycle = 0; cycle < 3; ++cycle) {
        run(s, woken, "echo " + std::to_string(cycle) + " >> /home/user/cycles");
        ASSERT_TRUE(eventually(
            [&] { return s.get("/v1/sandboxes/" + woken).js()["state"] == "paused"; }, 30s));
        const std::string out = run(s, woken, "cat /tmp/count");
        ASSERT_FALSE(out.empty());
        EXPECT_GE(std::stol(out), last) << cycle;
        last = std::stol(out);
    }
    EXPECT_EQ(run(s, woken, "tr '\\n' ' ' < /home/user/cycles"), "0 1 2 ");
    EXPECT_EQ(s.del("/v1/sandboxes/" + woken).status, 200u);
}

// A snapshot cut short by a SIGKILL of deskboxd: after the restart it is whole (a create from
// it has every byte) or absent, nothing half made stays on disk, and the source, frozen for the
// copy when the server died, runs again.
TEST(Snapshots, ACutShortSnapshotIsWholeOrAbsentAndItsSourceRunsOn) {
    REQUIRE_TEMPLATE();
    TempDir state("deskboxd-snapshot-kill");
    std::string source, sum;
    {
        Server s({}, state.path());
        source = create(s, {{"timeout_s", 600}});
        sum = run(s, source,
                  "head -c 314572800 /dev/urandom > /home/user/big && "
                  "sha256sum /home/user/big | cut -c1-16");
        ASSERT_EQ(sum.size(), 17u) << sum;
        std::thread snapshot([&] {
            try {
                s.post("/v1/sandboxes/" + source + "/snapshots", {{"name", "cut"}});
            } catch (const std::exception&) {  // the server died under the request
            }
        });
        // Into the copy: the staging directory is there.
        eventually(
            [&] {
                for (const auto& e : std::filesystem::directory_iterator(s.state() / "snapshots"))
                    if (e.path().filename().string().starts_with(".creating-")) return true;
                return false;
            },
            10s, 1ms);
        s.kill_hard();
        snapshot.join();
    }
    Server restarted({}, state.path());
    const json listed = restarted.get("/v1/snapshots").js();
    if (!listed["snapshots"].empty()) {
        const std::string copy = create(restarted, {{"snapshot", "cut"}});
        EXPECT_EQ(run(restarted, copy, "sha256sum /home/user/big | cut -c1-16"), sum);
        EXPECT_EQ(restarted.del("/v1/sandboxes/" + copy).status, 200u);
    }
    for (const auto& e : std::filesystem::directory_iterator(restarted.state() / "snapshots"))
        EXPECT_FALSE(e.path().filename().string().starts_with(".")) << e.path();
    EXPECT_TRUE(eventually([&] { return run(restarted, source, "echo alive") == "alive\n"; }, 30s))
        << restarted.get("/v1/sandboxes/" + source).body << restarted.log();
    EXPECT_EQ(restarted.get("/v1/sandboxes/" + source).js()["state"], "running");
    EXPECT_EQ(restarted.del("/v1/sandboxes/" + source).status, 200u);
}

// A tmpfs of `mb` MiB mounted at `path` for the test's life.
class SmallFilesystem {
  public:
    SmallFilesystem(const std::filesystem::path& path, int mb) : path_(path) {
        std::filesystem::create_directories(path);
        const std::string options = "size=" + std::to_string(mb) + "m,mode=0700";
        mounted_ = ::mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) == 0;
    }
    ~SmallFilesystem() {
        if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    }
    bool mounted() const { return mounted_; }

  private:
    std::filesystem::path path_;
    bool mounted_ = false;
};

// A snapshot that does not fit where snapshots are kept is 507, leaves nothing, and the sandbox
// runs on with what it had.
TEST(Snapshots, ACopyThatDoesNotFitIs507AndTheSandboxRunsOn) {
    REQUIRE_TEMPLATE();
    TempDir state("deskboxd-snapshot-full");
    SmallFilesystem small(state.path() / "snapshots", 32);
    ASSERT_TRUE(small.mounted()) << "mount tmpfs: " << std::strerror(errno);
    Server s({}, state.path());
    const std::string id = create(s, {});
    const std::string sum =
        run(s, id, "head -c 104857600 /dev/urandom > /home/user/big && sha256sum /home/user/big");
    auto refused = s.post("/v1/sandboxes/" + id + "/snapshots", {{"name", "big"}});
    EXPECT_EQ(refused.status, 507u) << refused.body << s.log();
    EXPECT_EQ(error_code(refused), "insufficient_storage");
    EXPECT_TRUE(s.get("/v1/snapshots").js()["snapshots"].empty());
    EXPECT_EQ(entries_under(s.state() / "snapshots"), 0u) << "nothing half made";
    EXPECT_EQ(s.get("/v1/sandboxes/" + id).js()["state"], "running");
    EXPECT_EQ(run(s, id, "sha256sum /home/user/big"), sum);
    // What fits is saved.
    run(s, id, "rm /home/user/big");
    auto made = s.post("/v1/sandboxes/" + id + "/snapshots", {{"name", "small"}});
    EXPECT_EQ(made.status, 201u) << made.body;
    EXPECT_EQ(s.del("/v1/sandboxes/" + id).status, 200u);
}

}  // namespace
}  // namespace deskbox
