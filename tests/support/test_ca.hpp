// A certificate authority of a test's own, made with the openssl command line in a folder of the
// test: the CA (what deskboxd would give sandboxes to trust) and a server certificate it signed
// for localhost and 127.0.0.1, which a TLS server inside a sandbox presents to clients there.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/child_process.hpp"

namespace deskbox::test {

struct TestCa {
    std::filesystem::path ca_pem, ca_key, server_pem, server_key;

    std::string ca_text() const {
        std::ifstream in(ca_pem);
        return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
};

inline void run_openssl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{"openssl"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = run_process(argv, std::chrono::seconds(60));
    if (result.status.exit_code != 0)
        throw std::runtime_error("openssl " + args.at(0) + " failed: " + result.err);
}

// Throws std::runtime_error with openssl's words.
inline TestCa make_test_ca(const std::filesystem::path& dir,
                           const std::string& name = "deskbox test egress CA") {
    TestCa ca{dir / "ca.pem", dir / "ca.key", dir / "server.pem", dir / "server.key"};
    const std::vector<std::string> p256 = {"-newkey", "ec", "-pkeyopt",
                                           "ec_paramgen_curve:prime256v1", "-nodes"};
    std::vector<std::string> make_ca = {"req", "-x509"};
    make_ca.insert(make_ca.end(), p256.begin(), p256.end());
    make_ca.insert(
        make_ca.end(),
        {"-keyout", ca.ca_key.string(), "-out", ca.ca_pem.string(), "-days", "2", "-subj",
         "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
         "keyUsage=critical,keyCertSign,cRLSign", "-addext", "subjectKeyIdentifier=hash"});
    run_openssl(make_ca);
    const auto csr = dir / "server.csr";
    std::vector<std::string> make_request = {"req"};
    make_request.insert(make_request.end(), p256.begin(), p256.end());
    make_request.insert(make_request.end(), {"-keyout", ca.server_key.string(), "-out",
                                             csr.string(), "-subj", "/CN=localhost"});
    run_openssl(make_request);
    const auto extensions = dir / "server.ext";
    std::ofstream(extensions) << "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                 "basicConstraints=critical,CA:FALSE\n"
                                 "keyUsage=critical,digitalSignature\n"
                                 "extendedKeyUsage=serverAuth\n"
                                 "subjectKeyIdentifier=hash\n"
                                 "authorityKeyIdentifier=keyid\n";
    run_openssl({"x509", "-req", "-in", csr.string(), "-CA", ca.ca_pem.string(), "-CAkey",
                 ca.ca_key.string(), "-CAcreateserial", "-out", ca.server_pem.string(), "-days",
                 "2", "-extfile", extensions.string()});
    return ca;
}

}  // namespace deskbox::test
