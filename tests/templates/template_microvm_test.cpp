// Templates users build, on the microVM runtime, through a real deskboxd: the store's rootfs
// becomes an ext4 image beside it (once per image), the template VM is saved once its ready
// check holds, and creates restore from that snapshot with the app already on screen. Deleting
// the template removes both. Needs root, buildah, QEMU and `minimal` with its microVM image
// (images/build_microvm.py minimal), whose kernel boots the templates built FROM it.
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"
#include "tests/support/test_paths.hpp"
#include "tests/templates/template_api.hpp"

namespace fs = std::filesystem;
using deskbox::run_process;
using deskbox::TempDir;
using deskbox::client::Method;
using deskbox::test::tar_of;
using deskbox::test::TemplateServer;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

bool microvm_image_of_minimal_built() {
    auto image = run_process({"python3", deskbox::test_paths::source("images/build_microvm.py"),
                              "--print-path", "minimal"});
    const std::string dir = image.out.substr(0, image.out.find('\n'));
    return image.status.exit_code == 0 && fs::exists(dir + "/rootfs.ext4") &&
           run_process({"sh", "-c", "command -v qemu-system-x86_64"}).status.exit_code == 0;
}

// Complete template snapshots (a memory file each) under `dir`.
std::size_t snapshots_in(const fs::path& dir) {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (fs::is_regular_file(entry.path() / "memory", ec)) ++n;
    return n;
}

class TemplateMicrovm : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (::geteuid() != 0 || run_process({"buildah", "--version"}).status.exit_code != 0 ||
            !microvm_image_of_minimal_built())
            return;
        server_ = std::make_unique<TemplateServer>();
    }
    static void TearDownTestSuite() { server_.reset(); }
    void SetUp() override {
        if (!server_)
            GTEST_SKIP() << "needs root, buildah, QEMU and minimal's microVM image "
                            "(images/build_microvm.py minimal)";
    }
    TemplateServer& s() { return *server_; }
    fs::path image_dir(const json& built) {
        return s().state() / "templates" / "images" / built["image_id"].get<std::string>();
    }
    // A create on the microVM runtime; the answer's JSON (with "id" when it worked).
    json create_microvm(const std::string& name, double* seconds = nullptr) {
        const auto started = Clock::now();
        auto r = s().api->send(
            Method::post, "/v1/sandboxes",
            json{{"template", name}, {"runtime", "microvm"}, {"network", false}}.dump(),
            "application/json");
        if (seconds) *seconds = std::chrono::duration<double>(Clock::now() - started).count();
        EXPECT_EQ(r.status, 201u) << r.body << "\n" << s().process->log();
        return r.json();
    }
    static std::unique_ptr<TemplateServer> server_;  // NOLINT: the suite's one server
};
std::unique_ptr<TemplateServer> TemplateMicrovm::server_;

}  // namespace

// The example on the microVM runtime: the xclock window is on screen when create
// answers (restored from the template snapshot taken after xclock's window appeared), the
// script runs, the env is the build's.
TEST_F(TemplateMicrovm, XclockDockerfileIsOnScreenWhenTheMicrovmCreateReturns) {
    TempDir context("deskbox-ctx");
    deskbox::test::write_clock_context(context.path());
    auto built = s().build({{"name", "clock"},
                            {"upload_id", s().upload(tar_of(context.path()))["upload_id"]},
                            {"build_args", {{"GREETING", "bonjour"}}}});
    ASSERT_EQ(built["status"], "succeeded") << built.dump(1);
    auto listed = s().api->get_json("/v1/templates/clock");
    EXPECT_EQ(listed["runtimes"], json::array({"container", "microvm"})) << listed.dump();

    double seconds = 0;
    auto created = create_microvm("clock", &seconds);
    ASSERT_TRUE(created.contains("id")) << created.dump();
    const std::string id = created["id"];
    EXPECT_EQ(created["runtime"], "microvm");
    auto windows = s().api->get_json("/v1/sandboxes/" + id + "/windows");
    EXPECT_TRUE(deskbox::test::has_window(windows, "XClock"))
        << "no xclock window when create answered: " << windows.dump();
    auto greeted = s().exec(id, "greet; stat -c %U /usr/local/bin/greet; hostname");
    EXPECT_EQ(greeted["stdout"], "bonjour from /home/user\nroot\n" + id + "\n") << greeted.dump();

    const fs::path microvm = image_dir(built) / "microvm";
    EXPECT_TRUE(fs::is_regular_file(microvm / "rootfs.ext4"));
    std::ifstream in(microvm / "build.json");
    const json made = json::parse(in, nullptr, false);
    EXPECT_GT(made.value("rootfs_image_seconds", 0.0), 0.0) << made.dump();
    EXPECT_EQ(snapshots_in(microvm / "snapshots"), 1u);
    EXPECT_EQ(snapshots_in(s().state() / "microvm" / "templates"), 0u)
        << "a store template's snapshots live with its image";
    std::printf(
        "clock: rootfs.ext4 made in %.1f s; first create (image, template VM, restore) "
        "%.1f s\n",
        made.value("rootfs_image_seconds", 0.0), seconds);

    // A second create restores the same snapshot: the app is on screen at once again.
    auto again = create_microvm("clock", &seconds);
    ASSERT_TRUE(again.contains("id")) << again.dump();
    EXPECT_TRUE(deskbox::test::has_window(
        s().api->get_json("/v1/sandboxes/" + again["id"].get<std::string>() + "/windows"),
        "XClock"));
    EXPECT_EQ(snapshots_in(microvm / "snapshots"), 1u);
    std::printf("clock: a create restored from the template snapshot %.1f s\n", seconds);
    s().api->delete_json("/v1/sandboxes/" + again["id"].get<std::string>());
    s().api->delete_json("/v1/sandboxes/" + id);
}

// The image and snapshots a microVM made of a template go with it; the shipped base it stands on
// (whose kernel it borrowed) keeps its files.
TEST_F(TemplateMicrovm, DeletingTheTemplateRemovesItsMicrovmImageAndSnapshots) {
    auto built = s().build({{"name", "terminal"},
                            {"dockerfile",
                             // -e: no shell, whose prompt would retitle the window.
                             "FROM deskbox/minimal\nCMD [\"xterm\", \"-title\", "
                             "\"from-a-dockerfile\", \"-e\", \"sleep\", \"infinity\"]\n"}});
    ASSERT_EQ(built["status"], "succeeded") << built.dump(1);
    const fs::path image = image_dir(built);
    const json bases = json::parse(std::ifstream(image / "bases.json"), nullptr, false);
    ASSERT_TRUE(bases.is_object()) << "no bases.json beside the rootfs";
    const fs::path base_boot =
        fs::path(bases["shipped_rootfs"][0].get<std::string>()).parent_path() / "microvm";
    const auto kernel_size = fs::file_size(base_boot / "vmlinuz");

    auto created = create_microvm("terminal");
    ASSERT_TRUE(created.contains("id")) << created.dump();
    const std::string id = created["id"];
    const auto windows = s().api->get_json("/v1/sandboxes/" + id + "/windows").dump();
    EXPECT_NE(windows.find("from-a-dockerfile"), std::string::npos) << windows;
    EXPECT_TRUE(fs::is_regular_file(image / "microvm" / "rootfs.ext4"));
    EXPECT_EQ(snapshots_in(image / "microvm" / "snapshots"), 1u);
    EXPECT_EQ(s().api->send(Method::del, "/v1/templates/terminal").status, 409u)
        << "in use by a sandbox";
    s().api->delete_json("/v1/sandboxes/" + id);

    EXPECT_EQ(s().api->send(Method::del, "/v1/templates/terminal").status, 200u);
    EXPECT_FALSE(fs::exists(image)) << "the image folder, its ext4 and snapshots stay";
    EXPECT_EQ(snapshots_in(s().state() / "microvm" / "templates"), 0u);
    EXPECT_EQ(s().api->send(Method::get, "/v1/templates/terminal").status, 404u);
    EXPECT_TRUE(fs::is_regular_file(base_boot / "vmlinuz"));
    EXPECT_EQ(fs::file_size(base_boot / "vmlinuz"), kernel_size);
}

// An image imported from an archive stands on no deskbox template: `minimal`'s kernel boots it
// (bases.json's boot_from), so it is offered on the microVM runtime too and its CMD is on
// screen when the create answers.
TEST_F(TemplateMicrovm, AnImportedImageRunsOnTheMicrovmToo) {
    deskbox::test::TestEngine engine;
    const std::string upload_id = s().upload_in_parts(engine.oci_archive(
        deskbox::test::minimal_rootfs(), "xterm -title imported-vm -e sleep infinity", "vm"));
    auto imported = s().build({{"name", "importvm"}, {"upload_id", upload_id}}, "imports");
    ASSERT_EQ(imported["status"], "succeeded") << imported.dump(1);
    const json bases =
        json::parse(std::ifstream(image_dir(imported) / "bases.json"), nullptr, false);
    EXPECT_EQ(bases["shipped_rootfs"], json::array()) << bases.dump();
    ASSERT_EQ(bases["boot_from"].size(), 1u) << bases.dump();
    const auto listed = s().api->get_json("/v1/templates/importvm");
    EXPECT_NE(listed["runtimes"].dump().find("microvm"), std::string::npos) << listed.dump();

    auto created = create_microvm("importvm");
    ASSERT_TRUE(created.contains("id")) << created.dump();
    const std::string id = created["id"];
    const auto windows = s().api->get_json("/v1/sandboxes/" + id + "/windows").dump();
    EXPECT_NE(windows.find("imported-vm"), std::string::npos) << windows;
    EXPECT_EQ(s().exec(id, "id -un")["stdout"], "user\n");
    s().api->delete_json("/v1/sandboxes/" + id);
    EXPECT_EQ(s().api->send(Method::del, "/v1/templates/importvm").status, 200u);
}
