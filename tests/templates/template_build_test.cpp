// Templates users build, through a real deskboxd: buildah reads the Dockerfiles, RUN steps run in
// runc with deskbox's network (apt reaches the Debian mirror, nothing of the host), and
// sandboxes start from the result on the container runtime. One server for the suite: its first
// build imports deskbox/minimal into the engine. Needs root, buildah and the built `minimal`.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "server/client/api_client.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_paths.hpp"
#include "tests/templates/template_api.hpp"

namespace fs = std::filesystem;
using deskbox::ChildProcess;
using deskbox::run_process;
using deskbox::TempDir;
using deskbox::client::ApiClient;
using deskbox::client::Method;
using deskbox::test::tar_of;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using Server = deskbox::test::TemplateServer;

// The seconds of this test process's long RUN step: 300 and a fraction of its own, so another
// run of these tests on the machine never passes for ours.
const std::string& sleeper_seconds() {
    static const std::string seconds = "300." + std::to_string(::getpid());
    return seconds;
}

std::string sleeper_dockerfile() {
    return "FROM deskbox/minimal\nRUN sleep " + sleeper_seconds() + "\n";
}

// The pid of this test's `sleep 300.<pid>` in build `id`'s cgroup (the engine and its RUN steps'
// processes run in it), or 0.
pid_t sleep_300_of(const std::string& id) {
    const std::string wanted = std::string("sleep") + '\0' + sleeper_seconds() + '\0';
    std::error_code ec;
    for (const auto& parent : fs::directory_iterator("/sys/fs/cgroup/pids", ec)) {
        std::ifstream procs(parent.path() / id / "cgroup.procs");
        for (pid_t pid; procs >> pid;) {
            std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
            std::string cmdline((std::istreambuf_iterator<char>(in)), {});
            if (cmdline == wanted) return pid;
        }
    }
    return 0;
}

// The `sleep 300` of build `id`'s RUN step once it runs, or 0. A fresh server's first build
// first imports deskbox/minimal into the engine (a minute and more on a loaded machine).
pid_t sleeper_of(const std::string& id) {
    pid_t pid = 0;
    deskbox::test::eventually([&] { return (pid = sleep_300_of(id)) != 0; }, 300s);
    return pid;
}

// Still running (a zombie is not).
bool alive(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    auto close = text.rfind(')');
    return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

// A build's cgroup, under whichever parent its deskboxd uses.
bool build_cgroup_exists(const std::string& id) {
    std::error_code ec;
    for (const auto& parent : fs::directory_iterator("/sys/fs/cgroup/pids", ec))
        if (parent.is_directory() && fs::exists(parent.path() / id)) return true;
    return false;
}

// Mounts below `dir` but the engine's disk (which stays while its server runs, and is taken
// over by the next one).
std::size_t mounts_under(const fs::path& dir) {
    std::ifstream in("/proc/self/mountinfo");
    std::size_t n = 0;
    const std::string disk = " " + (dir / "engine" / "disk").string() + " ";
    for (std::string line; std::getline(in, line);)
        if (line.find(" " + dir.string() + "/") != std::string::npos &&
            line.find(disk) == std::string::npos)
            ++n;
    return n;
}

// The used bytes of the filesystem at `path`.
std::uint64_t used_bytes(const fs::path& path) {
    struct statvfs st {};
    if (::statvfs(path.c_str(), &st) != 0) return 0;
    return static_cast<std::uint64_t>(st.f_blocks - st.f_bfree) * st.f_frsize;
}

class TemplateBuild : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (::geteuid() != 0 || run_process({"buildah", "--version"}).status.exit_code != 0) return;
        server_ = std::make_unique<Server>();
    }
    static void TearDownTestSuite() { server_.reset(); }
    void SetUp() override {
        if (!server_) GTEST_SKIP() << "needs root and buildah";
    }
    Server& s() { return *server_; }
    static std::unique_ptr<Server>
        server_;  // NOLINT: the suite's one server (its engine caches the bases)
};
std::unique_ptr<Server> TemplateBuild::server_;

}  // namespace

// The example: apt, COPY of a script, ENV, USER, WORKDIR and CMD ["xclock"]; the
// sandbox shows the xclock window as soon as it is created, runs the script, sees the env.
TEST_F(TemplateBuild, DockerfileBecomesADesktopWithItsAppRunning) {
    TempDir context("deskbox-ctx");
    deskbox::test::write_clock_context(context.path());
    auto upload = s().upload(tar_of(context.path()));
    auto built = s().build({{"name", "clock"},
                            {"upload_id", upload["upload_id"]},
                            {"build_args", {{"GREETING", "bonjour"}}}});
    ASSERT_EQ(built["status"], "succeeded") << built.dump(1);
    EXPECT_EQ(built["steps"], 8);
    auto listed = s().api->get_json("/v1/templates/clock");
    EXPECT_EQ(listed["kind"], "user");
    EXPECT_EQ(listed["base"], "deskbox/minimal");
    EXPECT_GT(listed["bytes"].get<std::uint64_t>(), 100u << 20);
    EXPECT_EQ(listed["runtimes"][0], "container") << listed.dump();

    auto created = s().api->post_json("/v1/sandboxes", {{"template", "clock"}, {"network", false}});
    ASSERT_TRUE(created.contains("id")) << created.dump();
    const std::string id = created["id"];
    // Create answers once the template's autostart window is mapped: no waiting here.
    auto windows = s().api->get_json("/v1/sandboxes/" + id + "/windows");
    EXPECT_TRUE(deskbox::test::has_window(windows, "XClock"))
        << "no xclock window: " << windows.dump() << "\n"
        << created.dump();
    auto greeted = s().exec(id, "greet; stat -c %U /usr/local/bin/greet");
    EXPECT_EQ(greeted["stdout"], "bonjour from /home/user\nroot\n") << greeted.dump();
    EXPECT_EQ(s().api->send(Method::del, "/v1/templates/clock").status, 409u)
        << "in use by a sandbox";
    s().api->delete_json("/v1/sandboxes/" + id);
}

// An unchanged rebuild is all cache; a change to one copied file reruns that step and those
// after it; no_cache reruns everything.
TEST_F(TemplateBuild, LayerCacheFollowsWhatEachStepDependsOn) {
    TempDir context("deskbox-ctx");
    std::ofstream(context.path() / "Dockerfile") << "FROM deskbox/minimal\n"
                                                    "RUN echo one > /one\n"
                                                    "COPY data.txt /data.txt\n"
                                                    "RUN cat /data.txt > /copy.txt\n";
    std::ofstream(context.path() / "data.txt") << "first\n";
    auto first = s().build(
        {{"name", "cached"}, {"upload_id", s().upload(tar_of(context.path()))["upload_id"]}});
    ASSERT_EQ(first["status"], "succeeded") << first.dump(1);
    auto again = s().build(
        {{"name", "cached"}, {"upload_id", s().upload(tar_of(context.path()))["upload_id"]}});
    ASSERT_EQ(again["status"], "succeeded");
    EXPECT_EQ(again["cached_steps"], 3) << s().log_of(again);
    EXPECT_EQ(again["image_id"], first["image_id"]) << "the same content gives the same image";

    std::ofstream(context.path() / "data.txt") << "second\n";
    auto changed = s().build(
        {{"name", "cached"}, {"upload_id", s().upload(tar_of(context.path()))["upload_id"]}});
    ASSERT_EQ(changed["status"], "succeeded");
    EXPECT_EQ(changed["cached_steps"], 1)
        << "only the RUN before the COPY: " << s().log_of(changed);
    auto sandbox =
        s().api->post_json("/v1/sandboxes", {{"template", "cached:latest"}, {"network", false}});
    ASSERT_TRUE(sandbox.contains("id")) << sandbox.dump();
    EXPECT_EQ(s().exec(sandbox["id"], "cat /copy.txt")["stdout"], "second\n");
    s().api->delete_json("/v1/sandboxes/" + sandbox["id"].get<std::string>());

    auto fresh = s().build({{"name", "cached"},
                            {"no_cache", true},
                            {"upload_id", s().upload(tar_of(context.path()))["upload_id"]}});
    ASSERT_EQ(fresh["status"], "succeeded");
    EXPECT_EQ(fresh["cached_steps"], 0);
    EXPECT_EQ(s().api->send(Method::del, "/v1/templates/cached").status, 200u);
    EXPECT_EQ(s().api->send(Method::get, "/v1/templates/cached").status, 404u);
}

// Stage one makes a program; stage two copies only it.
TEST_F(TemplateBuild, MultiStageCopiesOnlyTheArtifact) {
    auto built =
        s().build({{"name", "stages"},
                   {"tag", "v1"},
                   {"dockerfile",
                    "FROM deskbox/minimal AS build\n"
                    "RUN mkdir /out && printf '#!/bin/sh\\necho tool works\\n' > /out/tool "
                    "&& chmod 755 /out/tool && echo junk > /out/junk\n"
                    "FROM deskbox/minimal\n"
                    "COPY --from=build /out/tool /usr/local/bin/tool\n"},
                   {"start_cmd", "xterm -title started"}});
    ASSERT_EQ(built["status"], "succeeded") << built.dump(1);
    auto sandbox =
        s().api->post_json("/v1/sandboxes", {{"template", "stages:v1"}, {"network", false}});
    ASSERT_TRUE(sandbox.contains("id")) << sandbox.dump();
    auto out = s().exec(sandbox["id"], "tool; ls /out 2>&1 | head -1");
    EXPECT_EQ(out["stdout"], "tool works\nls: cannot access '/out': No such file or directory\n");
    s().api->delete_json("/v1/sandboxes/" + sandbox["id"].get<std::string>());
}

// Every mistake a person makes gets a 4xx naming the field or the Dockerfile line, before a
// build is queued; a failing RUN ends the build failed with its step and exit code.
TEST_F(TemplateBuild, BadInputsAreClearErrors) {
    auto error = [&](const json& body, unsigned status) {
        auto r = s().start_build(body);
        EXPECT_EQ(r.status, status) << body.dump() << " -> " << r.body;
        return r.json().value("error", json::object());
    };
    EXPECT_EQ(
        error({{"name", "x"}, {"dockerfile", "FROM deskbox/minimal\nFORM x\n"}}, 400)["message"],
        "Dockerfile line 2: unknown instruction 'FORM'");
    EXPECT_EQ(error({{"name", "x"}, {"dockerfile", "FROM deskbox/minimal\nCOPY nope /x\n"}},
                    400)["message"],
              "Dockerfile line 2: COPY source 'nope' is not in the build context");
    EXPECT_NE(error({{"name", "x"}, {"dockerfile", "FROM debian:12\n"}}, 400)["message"]
                  .get<std::string>()
                  .find("base image 'debian:12' is not here"),
              std::string::npos);
    EXPECT_EQ(error({{"name", "x"}, {"dockerfile", "FROM deskbox/nope\n"}}, 400)["field"],
              "dockerfile");
    EXPECT_EQ(error({{"name", "Bad_Name"}, {"dockerfile", "FROM deskbox/minimal\n"}}, 400)["field"],
              "name");
    EXPECT_EQ(error({{"name", "x"}, {"tag", "a b"}, {"dockerfile", "FROM deskbox/minimal\n"}},
                    400)["field"],
              "tag");
    EXPECT_EQ(error({{"name", "minimal"}, {"dockerfile", "FROM deskbox/minimal\n"}}, 409)["field"],
              "name");
    EXPECT_EQ(error({{"name", "x"}, {"dockerfile", "FROM deskbox/minimal\n"}, {"colour", 1}},
                    400)["field"],
              "colour");
    EXPECT_EQ(error({{"name", "x"}}, 400)["field"], "dockerfile");
    EXPECT_EQ(error({{"name", "x"}, {"upload_id", "upl-nope"}}, 404)["field"], "upload_id");
    EXPECT_EQ(
        error({{"name", "x"}, {"dockerfile", "FROM deskbox/minimal\n"}, {"limits", {{"pids", 1}}}},
              400)["field"],
        "limits.pids");
    auto not_tar = s().upload("this is not a tar archive");
    EXPECT_EQ(error({{"name", "x"}, {"upload_id", not_tar["upload_id"]}}, 400)["field"],
              "upload_id");
    EXPECT_EQ(
        s().api
            ->send(Method::put,
                   "/v1/templates/uploads/" + not_tar["upload_id"].get<std::string>() + "?offset=3",
                   "x")
            .status,
        409u)
        << "a part must start at the upload's size";

    auto failed = s().build(
        {{"name", "fails"},
         {"dockerfile", "FROM deskbox/minimal\nRUN echo before && exit 3\nRUN echo never\n"}});
    EXPECT_EQ(failed["status"], "failed");
    EXPECT_EQ(failed["error"]["code"], "step_failed");
    EXPECT_EQ(failed["error"]["step"], 2);
    EXPECT_EQ(failed["error"]["exit_code"], 3);
    EXPECT_NE(failed["error"]["log_tail"].get<std::string>().find("before"), std::string::npos);
    EXPECT_EQ(s().api->send(Method::get, "/v1/templates/fails").status, 404u);

    // The same name:tag twice at once.
    auto slow = s().start_build(
        {{"name", "twice"}, {"dockerfile", "FROM deskbox/minimal\nRUN sleep 20\n"}});
    ASSERT_EQ(slow.status, 202u) << slow.body;
    EXPECT_EQ(error({{"name", "twice"}, {"dockerfile", "FROM deskbox/minimal\n"}}, 409)["field"],
              "name");
    s().api->post_json("/v1/templates/builds/" + slow.json()["build_id"].get<std::string>() +
                       "/cancel");
}

// A RUN step is on deskbox's network: the mirror yes, the host no (a listener on every host
// address, which the step tries at the host's own address and at the router's).
TEST_F(TemplateBuild, RunStepsCannotReachTheHost) {
    deskbox::UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_in any{};
    any.sin_family = AF_INET;
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&any), sizeof any), 0);
    ASSERT_EQ(::listen(listener.get(), 8), 0);
    socklen_t len = sizeof any;
    ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&any), &len);
    const std::string port = std::to_string(ntohs(any.sin_port));
    auto addresses = run_process({"hostname", "-I"}).out;
    std::string host_ip = addresses.substr(0, addresses.find(' '));
    ASSERT_FALSE(host_ip.empty());
    auto built = s().build({{"name", "probe"},
                            {"no_cache", true},
                            {"dockerfile", "FROM deskbox/minimal\nRUN for a in " + host_ip +
                                               " 10.0.2.2 127.0.0.1; do "
                                               "if curl -s -m 3 -o /dev/null http://$a:" +
                                               port +
                                               "/; then echo REACHED $a; "
                                               "else echo blocked $a; fi; done\n"}});
    ASSERT_EQ(built["status"], "succeeded") << built.dump(1);
    auto log = s().log_of(built);
    EXPECT_EQ(log.find("\nREACHED"), std::string::npos) << log;
    EXPECT_NE(log.find("blocked " + host_ip), std::string::npos) << log;
    pollfd p{listener.get(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "a connection reached the host";
}

// Cancelling a running build stops its RUN step's processes and leaves no container, mount or
// cgroup; so does a deskboxd SIGKILLed mid-build, once the next one starts.
TEST_F(TemplateBuild, CancelAndAKilledServerLeaveNothing) {
    auto started = s().start_build(
        {{"name", "sleeper"}, {"no_cache", true}, {"dockerfile", sleeper_dockerfile()}});
    ASSERT_EQ(started.status, 202u) << started.body;
    const std::string id = started.json()["build_id"];
    const pid_t sleeper = sleeper_of(id);
    ASSERT_NE(sleeper, 0) << "no sleep 300 in the build's cgroup";
    ASSERT_TRUE(build_cgroup_exists(id));
    {
        // Another deskboxd starting on the machine clears its own leftovers, not this build.
        Server neighbour;
        EXPECT_TRUE(alive(sleeper)) << "a second deskboxd killed the first one's build";
    }
    auto cancelled = s().api->post_json("/v1/templates/builds/" + id + "/cancel");
    EXPECT_EQ(cancelled["status"], "cancelled") << cancelled.dump(1);
    EXPECT_FALSE(alive(sleeper));
    EXPECT_FALSE(build_cgroup_exists(id));
    EXPECT_EQ(mounts_under(s().state() / "templates"), 0u);

    auto again = s().start_build(
        {{"name", "sleeper"}, {"no_cache", true}, {"dockerfile", sleeper_dockerfile()}});
    ASSERT_EQ(again.status, 202u) << again.body;
    const std::string second = again.json()["build_id"];
    const pid_t second_sleeper = sleeper_of(second);
    ASSERT_NE(second_sleeper, 0);
    s().process->kill_hard();
    s().start();
    auto after = s().api->get_json("/v1/templates/builds/" + second);
    EXPECT_EQ(after["status"], "failed");
    EXPECT_EQ(after["error"]["code"], "restarted");
    EXPECT_FALSE(alive(second_sleeper));
    EXPECT_EQ(mounts_under(s().state() / "templates"), 0u);
    EXPECT_FALSE(build_cgroup_exists(second));
    EXPECT_TRUE(fs::is_empty(s().state() / "templates" / "work"));
}

// A RUN step's root is the root of the engine's user namespace, a range of host ids no sandbox
// gets (the last of --userns-range), never host root; what one step writes is its own in the
// next (the engine's storage is written with the namespace's ids); the stored rootfs has the ids
// a shipped one has (root's files are 0 on disk) and still shares unchanged files with its base.
TEST_F(TemplateBuild, RunStepsRunInAUserNamespaceOfTheirOwn) {
    constexpr std::uint64_t kEngineRoot = (1ull << 30) + 4095ull * 65536;  // default range's last
    auto built = s().build({{"name", "userns"},
                            {"no_cache", true},
                            {"dockerfile",
                             "FROM deskbox/minimal\n"
                             "RUN cat /proc/self/uid_map > /uid_map && useradd -m builder\n"
                             "RUN ls -ln /home > /home.txt && su builder -c 'touch ~/mine' && "
                             "stat -c '%u:%g %n' /etc/passwd /home/builder /home/builder/mine "
                             ">> /home.txt\n"}});
    ASSERT_EQ(built["status"], "succeeded") << built.dump(1);
    const fs::path rootfs =
        s().state() / "templates" / "images" / built["image_id"].get<std::string>() / "rootfs";
    std::ifstream uid_map(rootfs / "uid_map");
    std::uint64_t inside = 1, host = 0, count = 0;
    uid_map >> inside >> host >> count;
    EXPECT_EQ(inside, 0u);
    EXPECT_EQ(host, kEngineRoot) << "RUN's root is host id " << host;
    EXPECT_EQ(count, 65536u);
    std::ifstream listing(rootfs / "home.txt");
    const std::string home((std::istreambuf_iterator<char>(listing)), {});
    EXPECT_NE(home.find("1001 1001"), std::string::npos) << home;
    EXPECT_NE(home.find("0:0 /etc/passwd\n1001:1001 /home/builder\n1001:1001 /home/builder/mine"),
              std::string::npos)
        << home;
    struct stat st {};
    ASSERT_EQ(::stat((rootfs / "etc" / "passwd").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u) << "the store's rootfs has a shipped rootfs's ids";
    ASSERT_EQ(::stat((rootfs / "home" / "builder" / "mine").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1001u);
    ASSERT_EQ(::stat((rootfs / "usr" / "bin" / "bash").c_str(), &st), 0);
    EXPECT_GE(st.st_nlink, 2u) << "unchanged files are hard links to the base's";
    // The engine's storage belongs to the range, and says which mapping wrote it.
    ASSERT_EQ(::stat((s().state() / "templates" / "engine" / "disk" / "storage").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kEngineRoot);
    std::ifstream ids(s().state() / "templates" / "engine" / "ids");
    std::string record;
    std::getline(ids, record);
    EXPECT_EQ(record, "0 " + std::to_string(kEngineRoot) + " 65536");

    auto sandbox =
        s().api->post_json("/v1/sandboxes", {{"template", "userns"}, {"network", false}});
    ASSERT_TRUE(sandbox.contains("id")) << sandbox.dump();
    EXPECT_EQ(s().exec(sandbox["id"], "stat -c '%U %G' /home/builder/mine /etc/passwd")["stdout"],
              "builder builder\nroot root\n");
    s().api->delete_json("/v1/sandboxes/" + sandbox["id"].get<std::string>());
}

// Without user namespaces a build would run its RUN steps as host root: refused, saying why.
TEST_F(TemplateBuild, WithoutUserNamespacesBuildsAreRefused) {
    TempDir dir("deskbox-templates-nouserns");
    deskbox::test::DeskboxdProcess server(deskbox::test_paths::kDeskboxd, dir.path() / "state",
                                          dir.path() / "deskboxd.log", {"--userns", "false"});
    deskbox::client::ClientOptions o;
    o.server = server.url();
    ApiClient api(o);
    auto r = api.send(Method::post, "/v1/templates/builds",
                      json({{"name", "x"}, {"dockerfile", "FROM deskbox/minimal\n"}}).dump(),
                      "application/json");
    EXPECT_EQ(r.status, 503u) << r.body;
    EXPECT_NE(r.body.find("--userns false"), std::string::npos) << r.body;
}

// An OCI archive made here (the minimal rootfs committed by the engine in storage of the test's
// own) imports and runs; one without a desktop is refused, naming what is missing.
TEST_F(TemplateBuild, OciArchivesImportOrAreRefusedClearly) {
    const std::string minimal = deskbox::test::minimal_rootfs();
    deskbox::test::TestEngine engine;
    auto make_archive = [&](const std::string& source_dir, const std::string& name) {
        return engine.oci_archive(source_dir, "xterm -title imported", name);
    };
    const std::string upload_id = s().upload_in_parts(make_archive(minimal, "desk"));
    auto imported = s().build({{"name", "imported"}, {"upload_id", upload_id}}, "imports");
    ASSERT_EQ(imported["status"], "succeeded") << imported.dump(1);
    auto sandbox =
        s().api->post_json("/v1/sandboxes", {{"template", "imported"}, {"network", false}});
    ASSERT_TRUE(sandbox.contains("id")) << sandbox.dump();
    EXPECT_EQ(s().exec(sandbox["id"], "id -un")["stdout"], "user\n");
    s().api->delete_json("/v1/sandboxes/" + sandbox["id"].get<std::string>());

    // busybox alone: a shell, no X.
    TempDir tiny("deskbox-tiny");
    fs::create_directories(tiny.path() / "bin");
    fs::create_directories(tiny.path() / "etc");
    fs::copy_file("/bin/busybox", tiny.path() / "bin" / "busybox");
    for (const char* tool : {"sh", "grep", "cut", "cp", "mkdir", "chmod", "chown", "cat"})
        fs::create_symlink("busybox", tiny.path() / "bin" / tool);
    std::ofstream(tiny.path() / "etc" / "passwd") << "root:x:0:0:root:/root:/bin/sh\n";
    auto small = s().upload(make_archive(tiny.path().string(), "tiny"));
    auto refused = s().build({{"name", "tiny"}, {"upload_id", small["upload_id"]}}, "imports");
    EXPECT_EQ(refused["status"], "failed");
    EXPECT_EQ(refused["error"]["code"], "contract");
    EXPECT_NE(refused["error"]["message"].get<std::string>().find("Xvfb (Debian package xvfb)"),
              std::string::npos)
        << refused.dump(1);
}

// Builds write to the engine's own disk, never the host's: a build past its `limits.disk_mb` is
// stopped in the step that wrote it, one that fills the disk (2 GiB here) ends `disk_full`
// naming the flag, and either way what the step wrote is gone afterwards.
TEST(TemplateDisk, BuildsStayWithinTheirLimitAndTheEnginesDisk) {
    if (::geteuid() != 0 || run_process({"buildah", "--version"}).status.exit_code != 0)
        GTEST_SKIP() << "needs root and buildah";
    Server s({"--template-disk-gb", "2"});
    auto base = s.build({{"name", "base"}, {"dockerfile", "FROM deskbox/minimal\nRUN true\n"}});
    ASSERT_EQ(base["status"], "succeeded") << base.dump(1);
    const fs::path disk = s.state() / "templates" / "engine" / "disk";
    struct statvfs st {};
    ASSERT_EQ(::statvfs(disk.c_str(), &st), 0);
    EXPECT_EQ(static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize >> 30, 1u)
        << "a 2 GiB disk (less ext4's own)";
    const std::uint64_t before = used_bytes(disk);

    auto limited = s.build({{"name", "hog"},
                            {"no_cache", true},
                            {"limits", {{"disk_mb", 64}}},
                            {"dockerfile",
                             "FROM deskbox/minimal\nRUN true\n"
                             "RUN dd if=/dev/zero of=/big bs=1M count=600 && sleep 20\n"}});
    EXPECT_EQ(limited["status"], "failed");
    EXPECT_EQ(limited["error"]["code"], "disk_limit") << limited.dump(1);
    EXPECT_EQ(limited["error"]["step"], 3) << limited.dump(1);
    EXPECT_NE(limited["error"]["message"].get<std::string>().find("64 MiB (limits.disk_mb)"),
              std::string::npos)
        << limited.dump(1);
    EXPECT_LT(used_bytes(disk), before + (64ull << 20)) << "the step's writes are gone";

    auto filled = s.build({{"name", "filler"},
                           {"no_cache", true},
                           {"dockerfile",
                            "FROM deskbox/minimal\nRUN true\n"
                            "RUN dd if=/dev/zero of=/big bs=1M count=4000\n"}});
    EXPECT_EQ(filled["status"], "failed");
    EXPECT_EQ(filled["error"]["code"], "disk_full") << filled.dump(1);
    EXPECT_NE(filled["error"]["message"].get<std::string>().find("--template-disk-gb"),
              std::string::npos)
        << filled.dump(1);
    EXPECT_LT(used_bytes(disk), before + (64ull << 20)) << "the step's writes are gone";
    EXPECT_EQ(s.api->send(Method::get, "/v1/templates/base").status, 200u)
        << "the other templates are untouched";

    // A larger --template-disk-gb grows the disk at the next start, its cache intact.
    s.process.reset();
    std::ifstream mountinfo("/proc/self/mountinfo");
    const std::string mounts((std::istreambuf_iterator<char>(mountinfo)), {});
    EXPECT_EQ(mounts.find(" " + disk.string() + " "), std::string::npos)
        << "a server that stops unmounts its engine's disk";
    s.extra_flags = {"--template-disk-gb", "3"};
    s.start();
    ASSERT_EQ(::statvfs(disk.c_str(), &st), 0) << "mounted at start: it holds the cache";
    EXPECT_EQ(static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize >> 30, 2u)
        << "a 3 GiB disk (less ext4's own)";
    auto again = s.build({{"name", "base"}, {"dockerfile", "FROM deskbox/minimal\nRUN true\n"}});
    ASSERT_EQ(again["status"], "succeeded") << again.dump(1);
    EXPECT_EQ(again["cached_steps"], 1) << s.log_of(again);
}

// A template the engine does not hold (pulled from another node, or the engine's storage made
// anew) is still a base: FROM it imports its rootfs once, configured as the record keeps it
// (env, working folder, start command), and the new rootfs shares its unchanged files.
TEST(TemplateStoreBase, FromATemplateTheEngineLacksImportsItsRootfsOnce) {
    if (::geteuid() != 0 || run_process({"buildah", "--version"}).status.exit_code != 0)
        GTEST_SKIP() << "needs root and buildah";
    Server own;
    auto app = own.build({{"name", "app"},
                          {"dockerfile",
                           "FROM deskbox/minimal\nENV GREETING=hi\nWORKDIR /srv\n"
                           "CMD [\"xterm\", \"-class\", \"ParentApp\"]\n"},
                          {"network", false}});
    ASSERT_EQ(app["status"], "succeeded") << app.dump(1) << own.log_of(app);
    // The engine's storage made anew: only the store has the template.
    own.process.reset();
    fs::remove_all(own.state() / "templates" / "engine");
    own.start();
    const json child_request = {{"name", "child"},
                                {"dockerfile", "FROM app\nRUN echo child > /etc/child\n"},
                                {"network", false}};
    auto child = own.build(child_request);
    ASSERT_EQ(child["status"], "succeeded") << child.dump(1) << own.log_of(child);
    EXPECT_NE(own.log_of(child).find("importing localhost/app:latest"), std::string::npos)
        << own.log_of(child);
    auto again = own.build(child_request);
    ASSERT_EQ(again["status"], "succeeded") << again.dump(1);
    EXPECT_EQ(own.log_of(again).find("importing localhost/app"), std::string::npos)
        << own.log_of(again);

    auto created = own.api->post_json("/v1/sandboxes", {{"template", "child"}, {"network", false}});
    ASSERT_TRUE(created.contains("id")) << created.dump();
    const std::string id = created["id"];
    const json windows = own.api->get_json("/v1/sandboxes/" + id + "/windows");
    EXPECT_TRUE(deskbox::test::has_window(windows, "ParentApp")) << windows.dump();
    EXPECT_EQ(own.exec(id, "echo $GREETING; cat /etc/child")["stdout"], "hi\nchild\n");
    own.api->delete_json("/v1/sandboxes/" + id);

    auto rootfs = [&](const char* name) {
        return own.state() / "templates" / "images" /
               own.api->get_json(std::string("/v1/templates/") + name)["image_id"]
                   .get<std::string>() /
               "rootfs";
    };
    struct stat a {
    }, b{};
    ASSERT_EQ(::stat((rootfs("app") / "usr/bin/xterm").c_str(), &a), 0);
    ASSERT_EQ(::stat((rootfs("child") / "usr/bin/xterm").c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino) << "a file unchanged from its base is shared";
}
