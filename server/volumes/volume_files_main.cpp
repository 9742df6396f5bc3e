// deskbox-volume-files ROOT UID GID: one file operation in a volume from the host, with the
// same semantics as the agent's files.* (guest-desktop/services/file_service.hpp). It chroots
// into ROOT and drops to UID:GID with no privileges before touching anything, so whatever
// links a sandbox left in the volume resolve inside it, and the kernel checks permissions as
// for the sandbox's user.
//   stdin:  one line {"method": "files.read|write|list|mkdir|remove|stat", "params": {...}},
//           then the body (files.write's bytes)
//   stdout: one line {"result": {...}} or {"error": {"code","message","field"?}}, then the
//           reply's body (files.read's bytes)
#include <grp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/parse_integer.hpp"
#include "guest-desktop/services/file_service.hpp"

namespace {

using deskbox::services::FileService;
using deskbox::services::Reply;
using deskbox::services::ServiceError;
using nlohmann::json;

int fail(const std::string& what) {
    std::fprintf(stderr, "deskbox-volume-files: %s: %s\n", what.c_str(), std::strerror(errno));
    return 2;
}

int confine(const char* root, const char* uid_text, const char* gid_text) {
    const auto uid = deskbox::parse_integer(uid_text);
    const auto gid = deskbox::parse_integer(gid_text);
    if (!uid || !gid || *uid < 1 || *gid < 1 || *uid > 65535 || *gid > 65535) {
        std::fprintf(stderr, "deskbox-volume-files: UID and GID must be 1..65535 (never root)\n");
        return 2;
    }
    if (::chroot(root) != 0) return fail(std::string("chroot ") + root);
    if (::chdir("/") != 0) return fail("chdir /");
    if (::setgroups(0, nullptr) != 0) return fail("setgroups");
    if (::setresgid(gid_t(*gid), gid_t(*gid), gid_t(*gid)) != 0) return fail("setresgid");
    if (::setresuid(uid_t(*uid), uid_t(*uid), uid_t(*uid)) != 0) return fail("setresuid");
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs");
    return 0;
}

Reply dispatch(const std::string& method, const json& params, const std::string& body) {
    const FileService files;
    if (method == "files.read") return files.read(params);
    Reply reply;
    if (method == "files.write")
        reply.result = files.write(params, body);
    else if (method == "files.list")
        reply.result = files.list(params);
    else if (method == "files.mkdir")
        reply.result = files.mkdir(params);
    else if (method == "files.remove")
        reply.result = files.remove(params);
    else if (method == "files.stat")
        reply.result = files.stat(params);
    else
        throw ServiceError("bad_request", "unknown method " + method, "method");
    return reply;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: deskbox-volume-files ROOT UID GID < request\n");
        return 2;
    }
    if (int status = confine(argv[1], argv[2], argv[3])) return status;
    // Whole-buffer reads and writes: a character at a time through a stdio-synced stream made a
    // 16 MiB write take a second.
    std::ios::sync_with_stdio(false);
    std::string header;
    std::getline(std::cin, header);
    std::ostringstream rest;
    rest << std::cin.rdbuf();
    const std::string body = std::move(rest).str();
    Reply reply;
    json answer;
    try {
        const json request = json::parse(header);
        reply = dispatch(request.at("method").get<std::string>(),
                         request.value("params", json::object()), body);
        answer = {{"result", reply.result}};
    } catch (const ServiceError& e) {
        answer = {{"error", e.to_json()}};
    } catch (const std::exception& e) {
        answer = {{"error", {{"code", "bad_request"}, {"message", e.what()}}}};
    }
    std::cout << answer.dump() << '\n' << reply.body;
    std::cout.flush();
    return std::cout ? 0 : 1;
}
