// `deskbox template build` end to end: the real CLI against a real deskboxd building with
// buildah FROM deskbox/minimal, then a sandbox of the template. Skips without buildah or the
// minimal template. Label `templates` (ctest -L templates); about a minute on 2 cores.
#include <fstream>
#include <string>

#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox::test {
namespace {

namespace fs = std::filesystem;

const std::string kDeskbox = deskbox::test_paths::kDeskboxCli;

void write_file(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
}

RunResult deskbox(Server& server, std::vector<std::string> args) {
    std::vector<std::string> argv = {
        "/usr/bin/env",    "-u",
        "DESKBOX_SERVER",  "-u",
        "DESKBOX_API_KEY", kDeskbox,
        "--server",        "http://127.0.0.1:" + std::to_string(server.port())};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult result = run_process(argv, std::chrono::minutes(5));
    EXPECT_FALSE(result.timed_out) << args[0] << " " << args[1];
    return result;
}

bool buildah_here() {
    return run_process({"buildah", "--version"}).status.exit_code == 0;
}

TEST(TemplateCli, BuildStreamsTheLogAndAFailingStepNamesItsExitCode) {
    REQUIRE_TEMPLATE();
    if (!buildah_here()) GTEST_SKIP() << "buildah is not installed";
    Server server;
    TempDir dir("deskbox-cli-template");
    const fs::path ctx = dir.path() / "ctx";
    write_file(ctx / "Dockerfile",
               "FROM deskbox/minimal\n"
               "COPY greeting.txt /etc/deskbox-cli-greeting\n"
               "ENV DESKBOX_CLI_TEMPLATE=built\n"
               "RUN echo \"the greeting: $(cat /etc/deskbox-cli-greeting)\"\n");
    write_file(ctx / "greeting.txt", "hello from the context");
    write_file(ctx / ".dockerignore", "*.log\n");
    write_file(ctx / "noise.log", "left out");

    RunResult built =
        deskbox(server, {"template", "build", "clitest:v1", ctx.string(), "--network", "off"});
    ASSERT_EQ(built.status.exit_code, 0) << built.out << built.err << server.log();
    // The log, streamed: the user's steps, what the RUN step printed, deskbox's own lines.
    EXPECT_NE(built.out.find("STEP 1/4: FROM deskbox/minimal\n"), std::string::npos) << built.out;
    EXPECT_NE(built.out.find("STEP 2/4: COPY greeting.txt /etc/deskbox-cli-greeting\n"),
              std::string::npos)
        << built.out;
    EXPECT_NE(built.out.find("the greeting: hello from the context\n"), std::string::npos)
        << built.out;
    EXPECT_NE(built.out.find("deskbox: template clitest:v1 is ready\n"), std::string::npos)
        << built.out;
    EXPECT_NE(built.err.find("1 left out by .dockerignore"), std::string::npos) << built.err;
    EXPECT_NE(built.err.find("deskbox: built clitest:v1 in "), std::string::npos) << built.err;
    // No terminal, no progress line.
    EXPECT_EQ(built.err.find("\033[K"), std::string::npos);

    RunResult ls = deskbox(server, {"template", "ls"});
    EXPECT_EQ(ls.status.exit_code, 0) << ls.err;
    EXPECT_NE(ls.out.find("clitest:v1"), std::string::npos) << ls.out;
    EXPECT_NE(ls.out.find("user"), std::string::npos) << ls.out;

    // A sandbox of it has the file and the environment.
    auto created = server.post("/v1/sandboxes", {{"template", "clitest:v1"}, {"network", false}});
    ASSERT_EQ(created.status, 201u) << created.body;
    const std::string id = created.js().value("id", "");
    EXPECT_EQ(run(server, id, "cat /etc/deskbox-cli-greeting; echo; printenv DESKBOX_CLI_TEMPLATE"),
              "hello from the context\nbuilt\n");
    EXPECT_EQ(server.del("/v1/sandboxes/" + id).status, 200u);

    // A step that fails: -f outside the context, so its text is sent.
    write_file(dir.path() / "Dockerfile.fail",
               "FROM deskbox/minimal\nRUN echo about to fail\nRUN exit 3\n");
    RunResult failed = deskbox(server, {"template", "build", "clitest-fail", "-f",
                                        (dir.path() / "Dockerfile.fail").string(), ctx.string()});
    EXPECT_EQ(failed.status.exit_code, 1) << failed.out << failed.err;
    EXPECT_NE(failed.out.find("about to fail\n"), std::string::npos) << failed.out;
    EXPECT_NE(failed.err.find("failing step: 3/3 RUN exit 3\n"), std::string::npos) << failed.err;
    EXPECT_NE(failed.err.find("exit code: 3\n"), std::string::npos) << failed.err;
    EXPECT_NE(failed.err.find("step 3 (RUN exit 3) failed with exit code 3"), std::string::npos)
        << failed.err;

    // Its log again, by id, and the builds list.
    auto builds = server.get("/v1/templates/builds").js().value("builds", json::array());
    ASSERT_EQ(builds.size(), 2u);
    const std::string failed_id = builds[0].value("build_id", "");
    RunResult logs = deskbox(server, {"template", "logs", failed_id});
    EXPECT_EQ(logs.status.exit_code, 0) << logs.err;
    EXPECT_NE(logs.out.find("about to fail\n"), std::string::npos) << logs.out;

    RunResult removed = deskbox(server, {"template", "rm", "clitest:v1"});
    EXPECT_EQ(removed.status.exit_code, 0) << removed.err;
    EXPECT_EQ(removed.out, "clitest:v1\n");
    EXPECT_EQ(deskbox(server, {"template", "ls"}).out.find("clitest:v1"), std::string::npos);
}

}  // namespace
}  // namespace deskbox::test
