// Volumes through deskboxd with real containers: data a sandbox writes outlives it, another
// sandbox and a restarted (and a SIGKILLed) server read it; one writer at a time; read-only
// mounts; the size is a hard quota; bad input; nothing stays mounted.
#include <gtest/gtest.h>

#include "server/runtime/container/mounts.hpp"
#include "tests/server/deskboxd_fixture.hpp"

namespace deskbox {
namespace {

using namespace test;

json volume_mount(const std::string& name, const std::string& path, bool read_only = false) {
    return {{"name", name}, {"path", path}, {"read_only", read_only}};
}

std::string create_with(Server& s, const json& volumes) {
    auto created =
        s.post("/v1/sandboxes", {{"network", false}, {"ready", false}, {"volumes", volumes}});
    EXPECT_EQ(created.status, 201u) << created.body << s.log();
    return created.js().value("id", "");
}

json command(Server& s, const std::string& id, const std::string& cmd) {
    auto a = s.post("/v1/sandboxes/" + id + "/commands", {{"cmd", cmd}});
    EXPECT_EQ(a.status, 200u) << a.body;
    return a.js();
}

std::size_t volume_mounts(const Server& s) {
    return runtime::mounts_under(s.state() / "volumes").size();
}

TEST(Volumes, DataOutlivesSandboxesAndServersWithOneWriterAndAHardSize) {
    REQUIRE_TEMPLATE();
    TempDir state("deskboxd-volumes");
    std::string next;
    {
        Server s({}, state.path());
        auto made = s.post("/v1/volumes",
                           {{"name", "work"}, {"size_mb", 32}, {"labels", {{"team", "qa"}}}});
        ASSERT_EQ(made.status, 201u) << made.body;
        EXPECT_EQ(made.js()["size_mb"], 32);
        EXPECT_EQ(s.post("/v1/volumes", {{"name", "work"}}).js()["error"]["code"], "volume_exists");

        const std::string writer = create_with(s, json::array({volume_mount("work", "/data")}));
        auto described = s.get("/v1/sandboxes/" + writer).js();
        EXPECT_EQ(described["volumes"][0]["name"], "work") << described.dump();
        // The guest user owns the volume and writes to it; its files keep guest ids on disk.
        auto wrote =
            command(s, writer,
                    "stat -c %u:%g /data && echo 'from the first sandbox' > /data/note && "
                    "mkdir -p /data/dir && head -c 100000 /dev/urandom > /data/dir/blob && "
                    "sha256sum /data/dir/blob | cut -d' ' -f1");
        EXPECT_EQ(wrote["exit_code"], 0) << wrote.dump();
        const std::string out = wrote["stdout"];
        ASSERT_EQ(out.substr(0, 10), "1000:1000\n") << out;
        const std::string blob_sum = out.substr(10);

        // The volume's files without a sandbox: what the sandbox wrote, and links it made that
        // point out of the volume resolve inside it (the host's files stay out of reach).
        EXPECT_EQ(s.get("/v1/volumes/work/files?path=/note").body, "from the first sandbox\n");
        command(s, writer,
                "ln -s /etc/shadow /data/shadow; ln -s / /data/root; ln -s ../../.. /data/up");
        for (const char* escape :
             {"/shadow", "/root/etc/shadow", "/up/etc/shadow", "/../etc/shadow"}) {
            auto a = s.get(std::string("/v1/volumes/work/files?path=") + escape);
            EXPECT_TRUE(a.status == 404u || a.status == 400u) << escape << ": " << a.status;
            EXPECT_EQ(a.body.find("root:"), std::string::npos) << escape << ": the host's shadow";
        }
        const std::string bytes(
            "\x00\xff\xfe"
            "binary\n",
            10);
        auto put = s.call(http::verb::put, "/v1/volumes/work/files?path=/api/deep/b.bin", bytes);
        EXPECT_EQ(put.status, 200u) << put.body;
        EXPECT_EQ(s.get("/v1/volumes/work/files?path=/api/deep/b.bin").body, bytes);
        auto listed = s.get("/v1/volumes/work/files?path=/api").js();
        EXPECT_EQ(listed["entries"][0]["name"], "deep") << listed.dump();
        // Written as the sandbox's user: the sandbox sees it as its own.
        EXPECT_EQ(command(s, writer, "stat -c %u /data/api/deep/b.bin")["stdout"], "1000\n");
        EXPECT_EQ(s.del("/v1/volumes/work/files?path=/api&recursive=true").status, 200u);
        EXPECT_EQ(s.get("/v1/volumes/work/files?path=/api").status, 404u);
        EXPECT_EQ(s.get("/v1/volumes/nope/files?path=/x").status, 404u);

        // A second writer is refused, naming the field; readers are welcome.
        auto second =
            s.post("/v1/sandboxes", {{"network", false},
                                     {"ready", false},
                                     {"volumes", json::array({volume_mount("work", "/data")})}});
        EXPECT_EQ(second.status, 409u) << second.body;
        EXPECT_EQ(second.js()["error"]["code"], "volume_in_use");
        EXPECT_EQ(second.js()["error"]["field"], "volumes[0].read_only");
        const std::string reader =
            create_with(s, json::array({volume_mount("work", "/mnt/work", true)}));
        auto read = command(s, reader, "cat /mnt/work/note; touch /mnt/work/x 2>&1; echo rc=$?");
        EXPECT_NE(read["stdout"].get<std::string>().find("from the first sandbox"),
                  std::string::npos)
            << read.dump();
        EXPECT_NE(read["stdout"].get<std::string>().find("Read-only file system"),
                  std::string::npos)
            << read.dump();
        auto inspected = s.get("/v1/volumes/work").js();
        EXPECT_EQ(inspected["mounts"].size(), 2u) << inspected.dump();
        EXPECT_GT(inspected["used_bytes"].get<long long>(), 100000);
        EXPECT_EQ(s.del("/v1/volumes/work").js()["error"]["code"], "volume_in_use");

        // Writes past the size fail inside the sandbox; the host's disk is untouched.
        auto filled = command(
            s, writer, "dd if=/dev/zero of=/data/fill bs=1M count=64 2>&1; rm -f /data/fill");
        EXPECT_NE(filled["stdout"].get<std::string>().find("No space left"), std::string::npos)
            << filled.dump();

        EXPECT_EQ(s.del("/v1/sandboxes/" + reader).status, 200u);
        EXPECT_EQ(s.del("/v1/sandboxes/" + writer).status, 200u);
        EXPECT_TRUE(eventually([&] { return volume_mounts(s) == 0; }, 10s)) << "left mounted";

        // The next sandbox writes and the server is SIGKILLed with it running.
        next = create_with(s, json::array({volume_mount("work", "/workspace")}));
        auto again = command(s, next,
                             "sha256sum /workspace/dir/blob | cut -d' ' -f1; "
                             "echo fsynced > /workspace/late && sync /workspace/late");
        EXPECT_EQ(again["stdout"], blob_sum) << again.dump();
        s.kill_hard();
    }
    {
        // The next server adopts the sandbox the crash left running, with its volume.
        Server restarted({}, state.path());
        auto listed = restarted.get("/v1/volumes").js();
        ASSERT_EQ(listed["volumes"].size(), 1u) << listed.dump();
        EXPECT_EQ(listed["volumes"][0]["labels"]["team"], "qa");
        ASSERT_EQ(listed["volumes"][0]["mounts"].size(), 1u) << listed.dump() << restarted.log();
        EXPECT_EQ(listed["volumes"][0]["mounts"][0]["sandbox_id"], next);
        EXPECT_EQ(command(restarted, next, "cat /workspace/late")["stdout"], "fsynced\n");
        auto refused = restarted.post(
            "/v1/sandboxes",
            {{"network", false}, {"volumes", json::array({volume_mount("work", "/data")})}});
        EXPECT_EQ(refused.js()["error"]["code"], "volume_in_use") << refused.body;
        EXPECT_EQ(restarted.del("/v1/sandboxes/" + next).status, 200u);
        EXPECT_TRUE(eventually([&] { return volume_mounts(restarted) == 0; }, 10s));

        const std::string last =
            create_with(restarted, json::array({volume_mount("work", "/data", true)}));
        auto kept = command(restarted, last, "cat /data/late /data/note");
        EXPECT_EQ(kept["stdout"], "fsynced\nfrom the first sandbox\n") << kept.dump();
        EXPECT_EQ(restarted.del("/v1/sandboxes/" + last).status, 200u);
        EXPECT_TRUE(eventually([&] { return volume_mounts(restarted) == 0; }, 10s));
        EXPECT_EQ(restarted.del("/v1/volumes/work").status, 200u);
        EXPECT_EQ(restarted.get("/v1/volumes/work").status, 404u);
        EXPECT_FALSE(std::filesystem::exists(restarted.state() / "volumes" / "work"));
    }
}

TEST(Volumes, BadInputGetsClearErrors) {
    Server s;
    auto code_of = [](const Answer& a) { return a.js()["error"].value("code", ""); };
    auto field_of = [](const Answer& a) { return a.js()["error"].value("field", ""); };
    auto bad_name = s.post("/v1/volumes", {{"name", "Bad/Name"}});
    EXPECT_EQ(bad_name.status, 400u);
    EXPECT_EQ(field_of(bad_name), "name");
    auto small = s.post("/v1/volumes", {{"name", "v"}, {"size_mb", 1}});
    EXPECT_EQ(small.status, 400u);
    EXPECT_EQ(field_of(small), "size_mb");
    EXPECT_EQ(s.post("/v1/volumes", {{"name", "v"}, {"color", "red"}}).status, 400u);
    EXPECT_EQ(s.post("/v1/volumes", {{"name", "v"}, {"size_mb", "big"}}).status, 400u);
    EXPECT_EQ(code_of(s.post("/v1/volumes", {{"name", "v"}, {"color", "red"}})), "bad_request");
    EXPECT_EQ(s.get("/v1/volumes/nope").status, 404u);
    EXPECT_EQ(s.del("/v1/volumes/nope").status, 404u);

    ASSERT_EQ(s.post("/v1/volumes", {{"name", "v"}, {"size_mb", 16}}).status, 201u);
    auto create = [&](const json& volumes) {
        return s.post("/v1/sandboxes", {{"network", false}, {"volumes", volumes}});
    };
    auto unknown = create(json::array({volume_mount("missing", "/data")}));
    EXPECT_EQ(unknown.status, 404u) << unknown.body;
    EXPECT_EQ(field_of(unknown), "volumes[0].name");
    EXPECT_EQ(code_of(unknown), "volume_not_found") << unknown.body;
    for (const char* path : {"data", "/opt/deskbox", "/opt/deskbox/bin", "/opt", "/etc/x", "/",
                             "/data/../etc", "/data/", "/home/other", "/data//x"}) {
        auto a = create(json::array({volume_mount("v", path)}));
        EXPECT_EQ(a.status, 400u) << path << ": " << a.body;
        EXPECT_EQ(field_of(a), "volumes[0].path") << path;
    }
    auto twice =
        create(json::array({volume_mount("v", "/data", true), volume_mount("v", "/data", true)}));
    EXPECT_EQ(field_of(twice), "volumes[1].path");
    EXPECT_EQ(field_of(create(json::array({{{"name", "v"}}}))), "volumes[0].path");
    EXPECT_EQ(field_of(create(json::array({{{"name", "v"}, {"path", "/data"}, {"rw", true}}}))),
              "volumes[0].rw");
    EXPECT_EQ(field_of(create(json{{"name", "v"}})), "volumes");
    EXPECT_EQ(s.get("/v1/sandboxes").js()["sandboxes"].size(), 0u);
    EXPECT_TRUE(s.get("/v1/volumes/v").js()["mounts"].empty());
    EXPECT_EQ(volume_mounts(s), 0u);
}

}  // namespace
}  // namespace deskbox
