#include "guest-desktop/services/egress_ca.hpp"

#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "common/atomic_file.hpp"
#include "common/parse_integer.hpp"
#include "common/pem.hpp"

namespace deskbox::services {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Firefox installs whose own distribution/policies.json, when the template has one, is merged
// too: Firefox reads one policies file, and which one wins has changed between versions.
constexpr const char* kFirefoxDistributionPolicies[] = {
    "/usr/lib/firefox-esr/distribution/policies.json",
    "/usr/lib/firefox/distribution/policies.json",
};

// A CA file or bundle larger than this is not one (Debian's bundle is about 220 KB).
constexpr std::uintmax_t kMaxTrustFileBytes = 16u << 20;

// The file's bytes, or nullopt when it does not exist. Throws std::runtime_error otherwise.
std::optional<std::string> read_trust_file(const fs::path& file) {
    std::error_code ec;
    if (!fs::exists(file, ec)) return std::nullopt;
    const auto size = fs::file_size(file, ec);
    if (ec) throw std::runtime_error(file.string() + ": " + ec.message());
    if (size > kMaxTrustFileBytes)
        throw std::runtime_error(file.string() + ": larger than " +
                                 std::to_string(kMaxTrustFileBytes >> 20) + " MiB");
    std::ifstream in(file, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad() || !in.is_open())
        throw std::runtime_error("cannot read " + file.string() + ": " + std::strerror(errno));
    return text;
}

void write_trust_file(const fs::path& file, const std::string& text) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (ec)
        throw std::runtime_error("cannot create " + file.parent_path().string() + ": " +
                                 ec.message());
    try {
        atomic_file::write(file, text, {0644, atomic_file::Durability::process_crash});
    } catch (const std::system_error& e) {
        throw std::runtime_error(e.what());
    }
}

// Where a symlinked bundle really is (another distribution's layout, or a template's own): the
// file is appended to there, so programs that open the target see the CA too. Dangling or not a
// link: the path itself. (Links resolve inside the root we run in: chrooted on the host.)
fs::path bundle_file() {
    std::error_code ec;
    if (!fs::is_symlink(kCaBundlePath, ec)) return kCaBundlePath;
    auto target = fs::canonical(kCaBundlePath, ec);
    return ec ? fs::path(kCaBundlePath) : target;
}

void merge_firefox_policy(const fs::path& file, const std::vector<std::string>& ca_paths,
                          const std::string& retired, EgressCaInstall& done) {
    const auto text = read_trust_file(file);
    json document = json::object();
    if (text) {
        document = json::parse(*text, nullptr, false);
        if (document.is_discarded() || !document.is_object()) {
            // Firefox would refuse the whole file anyway; its bytes are kept beside ours.
            fs::path aside = file;
            aside += ".deskbox-unreadable";
            std::error_code ec;
            fs::rename(file, aside, ec);
            if (ec)
                throw std::runtime_error("cannot move the unreadable " + file.string() +
                                         " aside: " + ec.message());
            done.note +=
                file.string() + " was not a JSON object: moved to " + aside.string() + ". ";
            document = json::object();
        }
    }
    json merged = firefox_policies_with(document, ca_paths, retired);
    if (text && merged == document) return;
    write_trust_file(file, merged.dump(2) + "\n");
    done.written.push_back(file.string());
}

void drop_privileges(const std::string& root, std::uint32_t uid, std::uint32_t gid) {
    auto fail = [](const std::string& what) {
        throw std::runtime_error(what + ": " + std::strerror(errno));
    };
    if (::chroot(root.c_str()) != 0) fail("chroot " + root);
    if (::chdir("/") != 0) fail("chdir /");
    if (::setgroups(0, nullptr) != 0) fail("setgroups");
    if (::setresgid(gid, gid, gid) != 0) fail("setresgid");
    if (::setresuid(uid, uid, uid) != 0) fail("setresuid");
    // Guest root without a user namespace is host root: keep none of root's capabilities, so
    // only the file permissions of the guest's own tree apply (a uid change cleared them anyway).
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        fail("prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3]{};
    if (::syscall(SYS_capset, &header, none) != 0) fail("capset");
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("no_new_privs");
}

std::vector<std::string> read_ca_file(const std::string& path) {
    const auto text = read_trust_file(path);
    if (!text) throw std::runtime_error(path + ": no such file");
    try {
        return pem_certificates(*text);
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(path + ": " + e.what());
    }
}

}  // namespace

json firefox_policies_with(json policies, const std::vector<std::string>& ca_paths,
                           const std::string& retired) {
    if (!policies.is_object()) policies = json::object();
    json& all = policies["policies"];
    if (!all.is_object()) all = json::object();
    json& certificates = all["Certificates"];
    if (!certificates.is_object()) certificates = json::object();
    json& install = certificates["Install"];
    if (!install.is_array()) install = json::array();
    const std::string ours = std::string(kFirefoxCaDir) + "/";
    json kept = json::array();
    for (const auto& entry : install) {
        const std::string path = entry.is_string() ? entry.get<std::string>() : "";
        const bool ours_gone =
            (path == retired && !retired.empty()) ||
            (path.rfind(ours, 0) == 0 &&
             std::find(ca_paths.begin(), ca_paths.end(), path) == ca_paths.end());
        if (!ours_gone) kept.push_back(entry);
    }
    for (const auto& path : ca_paths)
        if (std::find(kept.begin(), kept.end(), json(path)) == kept.end()) kept.push_back(path);
    install = std::move(kept);
    certificates["ImportEnterpriseRoots"] = true;
    return policies;
}

EgressCaInstall install_egress_ca(const std::vector<std::string>& certificates,
                                  const std::string& guest_ca_path) {
    EgressCaInstall done;
    const fs::path bundle = bundle_file();
    const auto old_bundle = read_trust_file(bundle);
    const std::string new_bundle = bundle_with(old_bundle.value_or(""), certificates);
    if (!old_bundle || new_bundle != *old_bundle) {
        write_trust_file(bundle, new_bundle);
        done.bundle_changed = true;
        done.written.push_back(bundle.string());
    }
    std::string pem;
    for (const auto& certificate : certificates) pem += certificate;
    if (read_trust_file(kLocalCaPath) != pem) {
        write_trust_file(kLocalCaPath, pem);
        done.written.push_back(kLocalCaPath);
    }
    // One file a certificate for Firefox; those of a longer list before go.
    std::vector<std::string> firefox_files;
    for (std::size_t i = 0; i < certificates.size(); ++i) {
        const std::string file =
            std::string(kFirefoxCaDir) + "/egress-ca-" + std::to_string(i + 1) + ".pem";
        if (read_trust_file(file) != certificates[i]) {
            write_trust_file(file, certificates[i]);
            done.written.push_back(file);
        }
        firefox_files.push_back(file);
    }
    std::error_code ec;
    for (std::size_t i = certificates.size() + 1;; ++i) {
        const std::string stale =
            std::string(kFirefoxCaDir) + "/egress-ca-" + std::to_string(i) + ".pem";
        if (!fs::remove(stale, ec)) break;
        done.written.push_back(stale + " (removed)");
    }
    merge_firefox_policy(kFirefoxPolicyPath, firefox_files, guest_ca_path, done);
    for (const char* file : kFirefoxDistributionPolicies)
        if (fs::is_regular_file(file, ec))
            merge_firefox_policy(file, firefox_files, guest_ca_path, done);
    return done;
}

std::string egress_ca_problem(const std::string& ca_path) {
    try {
        const auto certificates = read_ca_file(ca_path);
        const auto bundle = read_trust_file(kCaBundlePath);
        if (!bundle)
            return std::string("the egress CA is not installed: ") + kCaBundlePath +
                   " does not exist";
        for (std::size_t i = 0; i < certificates.size(); ++i)
            if (!bundle_holds(*bundle, certificates[i]))
                return "the egress CA is not installed: certificate " + std::to_string(i + 1) +
                       " of " + ca_path + " is not in " + kCaBundlePath +
                       ": nothing installed it before the agent started (a microVM image "
                       "whose init predates it? rebuild it: images/build_microvm.py)";
    } catch (const std::exception& e) {
        return std::string("the egress CA cannot be checked: ") + e.what();
    }
    return "";
}

int install_egress_ca_main(const std::vector<std::string>& args) {
    const char* usage =
        "usage: deskbox-agent --install-egress-ca FILE [--as GUEST_PATH] "
        "[--root DIR --uid N --gid N]\n";
    if (args.empty() || args[0].rfind("--", 0) == 0) {
        std::fputs(usage, stderr);
        return 2;
    }
    std::string file = args[0], guest_path = args[0], root;
    std::optional<long long> uid, gid;
    for (std::size_t i = 1; i < args.size(); i += 2) {
        if (i + 1 >= args.size()) {
            std::fprintf(stderr, "deskbox-agent: %s needs a value\n%s", args[i].c_str(), usage);
            return 2;
        }
        const std::string& value = args[i + 1];
        if (args[i] == "--as") {
            guest_path = value;
        } else if (args[i] == "--root") {
            root = value;
        } else if (args[i] == "--uid") {
            uid = parse_integer(value);
        } else if (args[i] == "--gid") {
            gid = parse_integer(value);
        } else {
            std::fprintf(stderr, "deskbox-agent: unknown option %s\n%s", args[i].c_str(), usage);
            return 2;
        }
    }
    const bool ids_ok =
        uid && gid && *uid >= 0 && *gid >= 0 && *uid <= 0xFFFFFFFEll && *gid <= 0xFFFFFFFEll;
    if (!root.empty() && !ids_ok) {
        std::fprintf(stderr, "deskbox-agent: --root needs --uid and --gid (0..4294967294)\n");
        return 2;
    }
    try {
        // Read before the chroot: on the host the file is deskboxd's, outside the guest's tree.
        const auto certificates = read_ca_file(file);
        if (!root.empty())
            drop_privileges(root, static_cast<std::uint32_t>(*uid),
                            static_cast<std::uint32_t>(*gid));
        ::umask(022);
        const EgressCaInstall done = install_egress_ca(certificates, guest_path);
        std::string what = "everything was in place";
        for (std::size_t i = 0; i < done.written.size(); ++i)
            what = (i == 0 ? "wrote " : what + ", ") + done.written[i];
        std::printf("deskbox-agent: egress CA installed (%zu certificate%s; %s)%s%s\n",
                    certificates.size(), certificates.size() == 1 ? "" : "s", what.c_str(),
                    done.note.empty() ? "" : "; ", done.note.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deskbox-agent: cannot install the egress CA: %s\n", e.what());
        return 1;
    }
    return 0;
}

}  // namespace deskbox::services
