// What the template suites share: a real deskboxd of their own (with the Debian-mirror flags
// RUN steps need), its API as a client sees it (uploads, builds followed through their log,
// commands), and the example Dockerfile.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "server/client/api_client.hpp"
#include "tests/support/debian_mirror.hpp"
#include "tests/support/deskboxd_process.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox::test {

inline std::string tar_of(const std::filesystem::path& dir) {
    auto r = run_process({"tar", "-C", dir.string(), "-cf", "-", "."}, std::chrono::seconds(60));
    EXPECT_EQ(r.status.exit_code, 0) << r.err;
    return r.out;
}

// The example: apt, COPY of a script, ARG and ENV, USER, WORKDIR and CMD ["xclock"]. The
// script prints "$GREETING from $(pwd)"; the build arg GREETING sets what the env says.
inline void write_clock_context(const std::filesystem::path& dir) {
    std::ofstream(dir / "Dockerfile") << "FROM deskbox/minimal\n"
                                         "ARG GREETING=hello\n"
                                         "RUN apt-get update -q && apt-get install -y -q "
                                         "--no-install-recommends x11-apps && "
                                         "rm -rf /var/lib/apt/lists/*\n"
                                         "COPY greet.sh /usr/local/bin/greet\n"
                                         "ENV GREETING=$GREETING\n"
                                         "USER user\n"
                                         "WORKDIR /home/user\n"
                                         "CMD [\"xclock\"]\n";
    std::ofstream(dir / "greet.sh") << "#!/bin/sh\necho \"$GREETING from $(pwd)\"\n";
    std::filesystem::permissions(dir / "greet.sh", std::filesystem::perms(0755));
}

// buildah with storage of the test's own (vfs, in a temp folder, as the test's root): makes
// the images tests import or push to a registry.
class TestEngine {
  public:
    // The first line of its output; a failure fails the test.
    std::string run(std::vector<std::string> args) const {
        std::vector<std::string> argv = {"buildah",
                                         "--root",
                                         (work_.path() / "root").string(),
                                         "--runroot",
                                         (work_.path() / "run").string(),
                                         "--storage-driver",
                                         "vfs"};
        argv.insert(argv.end(), args.begin(), args.end());
        auto r = run_process(argv, std::chrono::seconds(600));
        EXPECT_EQ(r.status.exit_code, 0) << args.front() << ": " << r.err;
        return r.out.substr(0, r.out.find('\n'));
    }
    // The folder `rootfs` (its files as they are) committed as image `name` with CMD `cmd`.
    void commit_rootfs(const std::string& rootfs, const std::string& cmd,
                       const std::string& name) const {
        auto container = run({"from", "scratch"});
        auto mount = run({"mount", container});
        EXPECT_EQ(run_process({"cp", "-a", rootfs + "/.", mount + "/"}, std::chrono::seconds(600))
                      .status.exit_code,
                  0);
        run({"umount", container});
        run({"config", "--cmd", cmd, container});
        run({"commit", "--quiet", "--rm", container, name});
    }
    // The folder `rootfs` committed as image `name` with CMD `cmd`, as an oci-archive's bytes.
    std::string oci_archive(const std::string& rootfs, const std::string& cmd,
                            const std::string& name) const {
        commit_rootfs(rootfs, cmd, name);
        const auto archive = (dir() / (name + ".tar")).string();
        run({"push", name, "oci-archive:" + archive});
        std::ifstream in(archive, std::ios::binary);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    }
    const std::filesystem::path& dir() const { return work_.path(); }

  private:
    TempDir work_{"deskbox-test-engine"};
};

// The built `minimal`'s rootfs (empty, and the test fails, if it is not built).
inline std::string minimal_rootfs() {
    auto built = run_process(
        {"python3", deskbox::test_paths::source("images/build.py"), "minimal", "--print-path"});
    const std::string rootfs = built.out.substr(0, built.out.find('\n'));
    EXPECT_TRUE(std::filesystem::is_directory(rootfs + "/usr"))
        << "minimal is not built: " << built.err;
    return rootfs;
}

// Whether a /windows answer lists a window of `window_class`.
inline bool has_window(const nlohmann::json& windows, const std::string& window_class) {
    for (const auto& w : windows.value("windows", nlohmann::json::array()))
        if (w.value("class", "") == window_class) return true;
    return false;
}

struct TemplateServer {
    TempDir dir{"deskbox-templates-test"};
    std::unique_ptr<DeskboxdProcess> process;
    std::unique_ptr<client::ApiClient> api;
    std::vector<std::string> extra_flags;

    explicit TemplateServer(std::vector<std::string> extra = {}) : extra_flags(std::move(extra)) {
        start();
    }
    void start() {
        auto flags = debian_mirror_flags();
        flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
        process =
            std::make_unique<DeskboxdProcess>(deskbox::test_paths::kDeskboxd, dir.path() / "state",
                                              dir.path() / "deskboxd.log", flags);
        client::ClientOptions o;
        o.server = process->url();
        api = std::make_unique<client::ApiClient>(o);
    }
    std::filesystem::path state() const { return dir.path() / "state"; }

    nlohmann::json upload(const std::string& bytes) {
        auto r =
            api->send(client::Method::post, "/v1/templates/uploads", bytes, "application/x-tar");
        EXPECT_EQ(r.status, 201u) << r.body;
        return r.json();
    }
    // An upload sent in 32 MiB parts, as a client with a body limit sends it; its id.
    std::string upload_in_parts(const std::string& bytes) {
        const std::size_t part = 32u << 20;
        const std::string id = upload(bytes.substr(0, part))["upload_id"];
        for (std::size_t at = part; at < bytes.size(); at += part) {
            auto r = api->send(client::Method::put,
                               "/v1/templates/uploads/" + id + "?offset=" + std::to_string(at),
                               bytes.substr(at, part), "application/octet-stream");
            EXPECT_EQ(r.status, 200u) << r.body;
        }
        return id;
    }
    client::Response start_build(const nlohmann::json& body, const char* route = "builds") {
        return api->send(client::Method::post, std::string("/v1/templates/") + route, body.dump(),
                         "application/json");
    }
    nlohmann::json wait_build(const std::string& id) {
        // Follows the log the way a client does, from each answer's next_offset.
        std::uint64_t offset = 0;
        for (int i = 0; i < 200; ++i) {
            auto chunk = api->get_json("/v1/templates/builds/" + id +
                                       "/log?wait_s=10&offset=" + std::to_string(offset));
            offset = chunk["next_offset"];
            if (chunk["complete"] == true) break;
        }
        return api->get_json("/v1/templates/builds/" + id);
    }
    nlohmann::json build(const nlohmann::json& body, const char* route = "builds") {
        auto r = start_build(body, route);
        EXPECT_EQ(r.status, 202u) << r.body;
        if (r.status != 202) return r.json();
        return wait_build(r.json()["build_id"]);
    }
    std::string log_of(const nlohmann::json& build) {
        return api->get_json("/v1/templates/builds/" + build["build_id"].get<std::string>() +
                             "/log")["text"];
    }
    nlohmann::json exec(const std::string& sandbox, const std::string& cmd) {
        return api->post_json("/v1/sandboxes/" + sandbox + "/commands", {{"cmd", cmd}});
    }
};

}  // namespace deskbox::test
