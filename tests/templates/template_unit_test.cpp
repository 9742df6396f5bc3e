// The pure parts of user-built templates: names and tags, the Dockerfile check that answers 400s
// before a build is queued, buildah's command line, the contract layer and the definition a
// built image becomes, and the strict request reader the template routes use.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "common/temp_dir.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_error.hpp"
#include "server/templates/buildah.hpp"
#include "server/templates/deskbox_layer.hpp"
#include "server/templates/dockerfile_check.hpp"
#include "server/templates/template_ref.hpp"

namespace fs = std::filesystem;
using namespace deskbox::templates;
using nlohmann::json;

TEST(TemplateRef, NamesAndTags) {
    EXPECT_EQ(parse_ref("myapp").str(), "myapp:latest");
    EXPECT_EQ(parse_ref("my-app:v2.1_rc").str(), "my-app:v2.1_rc");
    for (const char* bad : {"", "MyApp", "-x", "a/b", "x:", "x:.v", "x:a b", "../x"})
        EXPECT_THROW(parse_ref(bad), std::invalid_argument) << bad;
    EXPECT_TRUE(name_problem(std::string(64, 'a')));
    EXPECT_FALSE(name_problem(std::string(63, 'a')));
}

TEST(DockerfileCheck, ReadsInstructionsContinuationsAndStages) {
    auto r = read_dockerfile(
        "# syntax=docker/dockerfile:1\n"
        "# escape=\\\n"
        "ARG BASE=deskbox/minimal\n"
        "FROM deskbox/minimal AS build\n"
        "RUN echo a \\\n"
        "  # a comment inside\n"
        "  && echo b\n"
        "FROM ${BASE}\n"
        "FROM build AS again\n"
        "copy --from=build /x /y\n"
        "CMD [\"xclock\"]\n");
    ASSERT_FALSE(r.problem) << r.problem->message;
    ASSERT_EQ(r.summary.instructions.size(), 7u);
    EXPECT_EQ(r.summary.instructions[2].keyword, "RUN");
    EXPECT_EQ(r.summary.instructions[2].line, 5u);
    EXPECT_NE(r.summary.instructions[2].arguments.find("&& echo b"), std::string::npos);
    EXPECT_EQ(r.summary.instructions[5].keyword, "COPY");
    // Only real bases: not an ARG expression, not an earlier stage.
    ASSERT_EQ(r.summary.base_images.size(), 1u);
    EXPECT_EQ(r.summary.base_images[0],
              (std::pair<std::size_t, std::string>{4, "deskbox/minimal"}));
}

TEST(DockerfileCheck, NamesTheLineOfEachMistake) {
    auto problem = [](const std::string& text) {
        auto r = read_dockerfile(text);
        return r.problem ? std::to_string(r.problem->line) + " " + r.problem->message : "";
    };
    EXPECT_EQ(problem("FROM x\nFORM y\n"), "2 unknown instruction 'FORM'");
    EXPECT_EQ(problem("RUN true\nFROM x\n"),
              "1 RUN before the first FROM (only ARG may come before it)");
    EXPECT_EQ(problem("# nothing\n"), "0 the Dockerfile has no FROM");
    EXPECT_EQ(problem("FROM\n"), "1 FROM names no image");
    EXPECT_EQ(problem("FROM --platform=linux/amd64\n"), "1 FROM names no image");
    EXPECT_EQ(problem(std::string("FROM x\0", 7)), "0 the Dockerfile contains a NUL byte");
}

TEST(DockerfileCheck, CopySourcesMustBeInTheContext) {
    deskbox::TempDir dir("deskbox-ctx");
    std::ofstream(dir.path() / "here.txt") << "x";
    fs::create_directories(dir.path() / "sub");
    auto check = [&](const std::string& text) {
        auto p = check_copy_sources(read_dockerfile(text).summary, dir.path());
        return p ? std::to_string(p->line) + " " + p->message : "";
    };
    EXPECT_EQ(check("FROM x\nCOPY here.txt sub /dst/\n"), "");
    EXPECT_EQ(check("FROM x\nCOPY [\"here.txt\", \"/dst\"]\n"), "");
    EXPECT_EQ(check("FROM x\nCOPY --chown=1000 missing.txt /dst\n"),
              "2 COPY source 'missing.txt' is not in the build context");
    EXPECT_EQ(check("FROM x\nADD ../../etc/passwd /dst\n"),
              "2 ADD source '../../etc/passwd' is outside the build context");
    // Left to the engine: other stages, URLs, wildcards.
    EXPECT_EQ(check("FROM x\nCOPY --from=a /nope /dst\nADD https://x/y /z\nCOPY *.txt /d/\n"), "");
}

namespace {
EnginePaths engine_paths() {
    EnginePaths paths;
    paths.root = "/s/root";
    paths.runroot = "/run/r";
    paths.runc_root = "/run/c";
    paths.tmp = "/s/tmp";
    paths.home = "/s/engine/home";
    paths.enter = {"nsenter", "--user=/proc/7/ns/user", "--mount=/proc/7/ns/mnt", "--"};
    return paths;
}
}  // namespace

TEST(Buildah, BudCommandLineConfinesRunSteps) {
    const EnginePaths paths = engine_paths();
    BudOptions o;
    o.context = "/ctx";
    o.dockerfile = "/ctx/Dockerfile";
    o.image = "localhost/app:latest";
    o.network = "ns:/proc/8/ns/net";
    o.dns = "10.0.2.3";
    o.runc_root = "/run/c";
    o.build_args = {{"A", "b c"}};
    auto argv = engine_command(paths, bud_args(o));
    auto has = [&](std::initializer_list<std::string> seq) {
        return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
    };
    // Every engine command runs inside the engine's user and mount namespaces.
    EXPECT_TRUE(std::equal(paths.enter.begin(), paths.enter.end(), argv.begin()));
    EXPECT_TRUE(has({"--", "buildah", "--root", "/s/root", "--runroot", "/run/r"}));
    EXPECT_TRUE(has({"--pull=never"}));  // never a registry from the host
    EXPECT_TRUE(has({"--network", "ns:/proc/8/ns/net"}));
    EXPECT_TRUE(has({"--dns", "10.0.2.3"}));
    EXPECT_TRUE(has({"--build-arg", "A=b c"}));
    EXPECT_TRUE(has({"--runtime-flag", "root=/run/c"}));
    EXPECT_TRUE(has({"--cap-drop", "NET_RAW,MKNOD,AUDIT_WRITE"}));
    EXPECT_EQ(argv.back(), "/ctx");
    EXPECT_FALSE(has({"--no-cache"}));
    // Rootless runc cannot make cgroups: the limits are the build cgroup's, never flags that
    // would fail every RUN ("cannot set memory limit: container could not join or create").
    for (const char* flag : {"--memory", "--cpu-quota", "--cgroup-parent", "--userns-uid-map"})
        EXPECT_FALSE(has({flag})) << flag;
}

TEST(Buildah, TheEngineIsToldItsUserNamespaceIsReady) {
    auto env = engine_env(engine_paths());
    EXPECT_EQ(env["_CONTAINERS_USERNS_CONFIGURED"], "done");  // no re-exec, no newuidmap
    // Not 0, or it locks host root's short-name cache and no short name resolves.
    EXPECT_NE(env["_CONTAINERS_ROOTLESS_UID"], "0");
    EXPECT_FALSE(env["_CONTAINERS_ROOTLESS_UID"].empty());
    EXPECT_EQ(env["HOME"], "/s/engine/home");
    EXPECT_EQ(env["XDG_RUNTIME_DIR"], "/run/r");  // not the server's /run/user/0
    EXPECT_EQ(env["TMPDIR"], "/s/tmp");
    EXPECT_EQ(engine_ids_record(1342111744), "0 1342111744 65536\n");
    EXPECT_NE(engine_ids_record(1342111744), engine_ids_record(1073741824));
}

TEST(Buildah, LimitsAreTheBuildCgroupsFiles) {
    BuildLimits limits;
    limits.memory_mb = 512;
    limits.cpus = 1.5;
    limits.pids = 100;
    auto settings = build_cgroup_settings(limits);
    auto find = [&](const std::string& file) -> const CgroupSetting* {
        for (const auto& s : settings)
            if (s.v1_file == file) return &s;
        return nullptr;
    };
    ASSERT_TRUE(find("memory.limit_in_bytes"));
    EXPECT_EQ(find("memory.limit_in_bytes")->v1_value, "536870912");
    EXPECT_EQ(find("memory.limit_in_bytes")->v2_file, "memory.max");
    ASSERT_TRUE(find("cpu.cfs_quota_us"));
    EXPECT_EQ(find("cpu.cfs_quota_us")->v1_value, "150000");
    EXPECT_EQ(find("cpu.cfs_quota_us")->v2_value, "150000 100000");
    EXPECT_EQ(find("cpu.cfs_period_us")->v1_value, "100000");
    ASSERT_TRUE(find("pids.max"));
    EXPECT_EQ(find("pids.max")->v1_value, "100");
    limits.cpus = 0;  // no quota: no cpu files at all
    settings = build_cgroup_settings(limits);
    EXPECT_FALSE(find("cpu.cfs_quota_us"));
    EXPECT_FALSE(find("cpu.cfs_period_us"));
}

TEST(DeskboxLayer, DefinitionTakesTheBaseSessionAndTheImagesCommand) {
    ImageConfig config;
    config.env = {"PATH=/usr/bin", "GREETING=hi", "HOME=/root"};
    config.cmd = {"xclock", "-digital"};
    config.working_dir = "/srv/app";
    config.labels[kSessionLabel] =
        R"({"window_manager":["openbox"],"autostart":[["xterm"]],"resolution":[1024,768],"dpi":96})";
    config.labels[kTemplateLabel] = "minimal";
    BuildRequest request;
    request.ready = {{"window_title", "xclock"}};
    auto d = make_definition(parse_ref("clock:v1"), config, request);
    EXPECT_EQ(d["name"], "clock:v1");
    EXPECT_EQ(d["base"], "deskbox/minimal");
    EXPECT_EQ(d["session"]["window_manager"], json::array({"openbox"}));
    EXPECT_EQ(d["session"]["resolution"], json::array({1024, 768}));
    // CMD replaces the base's autostart apps, run in WORKDIR.
    EXPECT_EQ(d["session"]["autostart"],
              json::array({json::array(
                  {"sh", "-c", "cd \"$0\" && exec \"$@\"", "/srv/app", "xclock", "-digital"})}));
    EXPECT_EQ(d["env"], json({{"PATH", "/usr/bin"}, {"GREETING", "hi"}}));  // HOME is the agent's
    EXPECT_EQ(d["ready"], request.ready);
    request.start_command = {"sh", "-c", "firefox"};
    config.working_dir.clear();
    d = make_definition(parse_ref("clock"), config, request);
    EXPECT_EQ(d["session"]["autostart"], json::array({json::array({"sh", "-c", "firefox"})}));
}

TEST(DeskboxLayer, JoinedCommandsSplitBackIntoTheSameWords) {
    EXPECT_EQ(join_command({"xclock"}), "xclock");
    EXPECT_EQ(join_command({"sh", "-c", "cd \"$0\" && exec x"}), "sh -c 'cd \"$0\" && exec x'");
    EXPECT_EQ(join_command({"echo", "it's"}), "echo 'it'\"'\"'s'");
    EXPECT_EQ(join_command({""}), "''");
}

TEST(DeskboxLayer, ContractRefusalIsReadFromTheLog) {
    EXPECT_FALSE(contract_refusal("STEP 1/3\nok\n"));
    EXPECT_EQ(*contract_refusal("x\ndeskbox-contract: missing: Xvfb (Debian package xvfb)\n"),
              "missing: Xvfb (Debian package xvfb)");
    EXPECT_NE(contract_script().find("exit 73"), std::string::npos);
    EXPECT_EQ(kContractRefused, 73);
}

TEST(RequestReader, StrictFieldsTypesAndRanges) {
    using deskbox::server::RequestReader;
    using deskbox::server::SandboxError;
    json body = {{"name", "x"},         {"n", 5},           {"flag", true},
                 {"map", {{"A", "1"}}}, {"cmd", "echo hi"}, {"limits", {{"cpus", 2}}}};
    RequestReader r(body);
    EXPECT_EQ(r.required_string("name"), "x");
    EXPECT_EQ(*r.integer("n", 1, 10), 5);
    EXPECT_EQ(*r.boolean("flag"), true);
    EXPECT_EQ(r.string_map("map", 4)->at("A"), "1");
    EXPECT_EQ(*r.command("cmd"), (std::vector<std::string>{"sh", "-c", "echo hi"}));
    auto limits = r.object("limits");
    EXPECT_EQ(*limits->number("cpus", 0.1, 64), 2);
    EXPECT_NO_THROW(limits->finish());
    EXPECT_FALSE(r.string("absent"));
    EXPECT_NO_THROW(r.finish());

    auto field_of = [](auto f) {
        try {
            f();
        } catch (const SandboxError& e) {
            return e.field() + ": " + e.what();
        }
        return std::string("no error");
    };
    json bad = {{"n", 11}, {"s", 3}, {"extra", 1}, {"limits", {{"pids", 1}}}};
    RequestReader b(bad);
    EXPECT_EQ(field_of([&] { b.integer("n", 1, 10); }), "n: n: expected an integer in 1..10");
    EXPECT_EQ(field_of([&] { b.string("s"); }), "s: s: expected a string");
    EXPECT_EQ(field_of([&] { b.object("limits")->integer("pids", 64, 100); }),
              "limits.pids: limits.pids: expected an integer in 64..100");
    EXPECT_EQ(field_of([&] { b.finish(); }), "extra: extra: unknown field");
    EXPECT_EQ(field_of([&] { RequestReader(json::array()); }),
              ": request body must be a JSON object");
}
