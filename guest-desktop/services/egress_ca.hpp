// The egress proxy's CA inside a guest (docs/ARCHITECTURE.md, "How a guest trusts the egress
// CA"): installed as the guest's root before its first process runs, so that everything that
// reads the system's trust store, and Firefox through its enterprise policy, trusts the
// certificates deskboxd's proxy makes. Who runs the install: the microVM's init (chrooted into
// the guest's root, as root) and, for containers, deskboxd on the sandbox's overlay before runc
// starts it (chrooted, as the guest's root in its user namespace): `deskbox-agent
// --install-egress-ca`. The agent itself checks at start that the CA it was told of is there.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::services {

// The environment variable naming the CA's PEM file in the guest (set by the host when the CA
// is given; the agent refuses to start when the file's certificates are not in the bundle).
inline constexpr const char* kEgressCaEnv = "DESKBOX_EGRESS_CA";
// The system trust store of Debian and its derivatives: OpenSSL's default CA file
// (/usr/lib/ssl/cert.pem links to it), GnuTLS's, curl's, Go's.
inline constexpr const char* kCaBundlePath = "/etc/ssl/certs/ca-certificates.crt";
// Where update-ca-certificates finds local CAs: the CA stays in a bundle it rebuilds.
inline constexpr const char* kLocalCaPath = "/usr/local/share/ca-certificates/deskbox-egress.crt";
// Firefox's system-wide enterprise policy file on Linux (any install, any profile).
inline constexpr const char* kFirefoxPolicyPath = "/etc/firefox/policies/policies.json";
// Certificates.Install imports the first certificate of each file only, so every certificate
// gets a file of its own here: egress-ca-1.pem (deskboxd's own), egress-ca-2.pem, ...
inline constexpr const char* kFirefoxCaDir = "/usr/local/share/deskbox";

// `policies` (a policies.json document) with Certificates.Install naming each of `ca_paths`
// (once, after the template's own entries; entries of ours that are not in `ca_paths` -- under
// kFirefoxCaDir, or `retired` -- go) and Certificates.ImportEnterpriseRoots true; every other
// policy is kept. A document that is not an object, or whose members on that path are of other
// types, gets objects and a list there.
nlohmann::json firefox_policies_with(nlohmann::json policies,
                                     const std::vector<std::string>& ca_paths,
                                     const std::string& retired = "");

// What install_egress_ca changed, for its log line.
struct EgressCaInstall {
    bool bundle_changed = false;  // false: the bundle held every certificate already
    std::vector<std::string> written;
    std::string note;  // e.g. an unreadable policies.json moved aside
};

// Installs `certificates` (pem_certificates' blocks) in the filesystem at "/": appended to
// kCaBundlePath unless there already (made with its folder when missing), written to
// kLocalCaPath, each to a file of its own under kFirefoxCaDir that Firefox's policies name
// (kFirefoxPolicyPath, and the distribution/policies.json of a Firefox ESR or Firefox install that
// has one), merged with what is there (`guest_ca_path`, which older installs named, goes).
// Running it again changes nothing. Throws std::runtime_error naming the file.
EgressCaInstall install_egress_ca(const std::vector<std::string>& certificates,
                                  const std::string& guest_ca_path);

// "" when every certificate of the PEM file `ca_path` is in kCaBundlePath; else why not.
std::string egress_ca_problem(const std::string& ca_path);

// deskbox-agent --install-egress-ca FILE [--as GUEST_PATH] [--root DIR --uid N --gid N]:
// reads FILE, then (with --root) chroots into DIR and becomes UID:GID without capabilities,
// and installs. GUEST_PATH is where the guest sees FILE (default: FILE). Returns the exit code;
// errors on stderr.
int install_egress_ca_main(const std::vector<std::string>& args);

}  // namespace deskbox::services
