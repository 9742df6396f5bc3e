// The proxy's two TLS ends for the names credential rules apply to. Towards the sandbox it
// serves a certificate for the name from deskboxd's private CA (egress_ca.hpp), which every
// sandbox trusts; towards the server it is a client that verifies the server's certificate
// against the host's trust store (and any CA files the operator adds), by the same name the
// sandbox asked for. Both ends speak HTTP/1.1 only (ALPN): the relay reads requests as HTTP/1.
// Every other name keeps its TLS end to end, untouched.
#pragma once

#include <boost/asio/ssl/context.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/network/http_relay.hpp"

namespace deskbox::network {

class EgressCa;
struct LeafCertificate;

class TlsInterception {
  public:
    struct Options {
        std::shared_ptr<EgressCa> ca;
        // CA files (PEM) servers' certificates may also chain to, beside the host's store.
        std::vector<std::filesystem::path> extra_upstream_trust;
    };
    // Throws (naming the file) when a trust file cannot be read.
    explicit TlsInterception(Options options);
    ~TlsInterception();

    // The context the sandbox's side of a connection to `name` is served with (cached per name).
    // Throws std::invalid_argument for a name the CA will not certify.
    std::shared_ptr<boost::asio::ssl::context> sandbox_side(const std::string& name);
    // The context connections to servers use; prepare_server_side() names each one.
    boost::asio::ssl::context& server_side() { return server_side_; }
    // Sets SNI, the name the certificate must carry, and ALPN http/1.1 on a new stream.
    // A reason when OpenSSL refuses one of them.
    static std::optional<std::string> prepare_server_side(TlsStream& stream,
                                                          const std::string& name);
    // Why a handshake with a server failed, in words: the certificate check's result when it
    // was the certificate, else the error.
    static std::string server_handshake_failure(TlsStream& stream, boost::system::error_code ec);

  private:
    struct Served {
        std::shared_ptr<const LeafCertificate> leaf;
        std::shared_ptr<boost::asio::ssl::context> context;
    };
    Options options_;
    boost::asio::ssl::context server_side_;
    std::mutex mutex_;
    std::map<std::string, Served> served_;
};

}  // namespace deskbox::network
