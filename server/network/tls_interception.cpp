#include "server/network/tls_interception.hpp"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/buffer.hpp>

#include <stdexcept>

#include "server/network/egress_ca.hpp"

namespace deskbox::network {
namespace {

namespace ssl = boost::asio::ssl;

// ALPN's wire form: each protocol prefixed by its length.
constexpr unsigned char kAlpnHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

// The sandbox's side: http/1.1 when the client offers it; a client offering only others (h2)
// gets no ALPN answer, which means HTTP/1.1 -- the relay reads nothing else.
int choose_http11(SSL*, const unsigned char** out, unsigned char* out_length,
                  const unsigned char* offered, unsigned int offered_length, void*) {
    unsigned char* chosen = nullptr;
    if (SSL_select_next_proto(&chosen, out_length, kAlpnHttp11, sizeof kAlpnHttp11, offered,
                              offered_length) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
}

}  // namespace

TlsInterception::TlsInterception(Options options)
    : options_(std::move(options)), server_side_(ssl::context::tls_client) {
    if (!options_.ca) throw std::invalid_argument("TLS interception needs a CA");
    SSL_CTX* native = server_side_.native_handle();
    SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
    server_side_.set_default_verify_paths();
    for (const auto& file : options_.extra_upstream_trust) {
        boost::system::error_code ec;
        server_side_.load_verify_file(file.string(), ec);
        if (ec)
            throw std::runtime_error("cannot load CA file " + file.string() + ": " + ec.message());
    }
    server_side_.set_verify_mode(ssl::verify_peer);
}

TlsInterception::~TlsInterception() = default;

std::shared_ptr<ssl::context> TlsInterception::sandbox_side(const std::string& name) {
    auto leaf = options_.ca->leaf_for(name);  // cached there; a renewed leaf is a new pointer
    std::lock_guard lock(mutex_);
    auto found = served_.find(name);
    if (found != served_.end() && found->second.leaf == leaf) return found->second.context;
    auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
    SSL_CTX* native = context->native_handle();
    SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
    context->use_certificate_chain(boost::asio::buffer(leaf->certificate_pem));
    context->use_private_key(boost::asio::buffer(leaf->key_pem), ssl::context::pem);
    SSL_CTX_set_alpn_select_cb(native, choose_http11, nullptr);
    // The CA bounds its own cache; this one follows it (names the CA dropped drop here too).
    if (served_.size() >= 1024) served_.clear();
    served_[name] = {leaf, context};
    return context;
}

std::optional<std::string> TlsInterception::prepare_server_side(TlsStream& stream,
                                                                const std::string& name) {
    SSL* native = stream.native_handle();
    if (SSL_set_tlsext_host_name(native, name.c_str()) != 1 ||
        SSL_set1_host(native, name.c_str()) != 1 ||
        SSL_set_alpn_protos(native, kAlpnHttp11, sizeof kAlpnHttp11) != 0)
        return "cannot prepare TLS to " + name + ": " + openssl_errors();
    return std::nullopt;
}

std::string TlsInterception::server_handshake_failure(TlsStream& stream,
                                                      boost::system::error_code ec) {
    long verdict = SSL_get_verify_result(stream.native_handle());
    if (verdict != X509_V_OK)
        return std::string("the server's certificate is not trusted: ") +
               X509_verify_cert_error_string(verdict);
    return "TLS handshake with the server failed: " + ec.message();
}

}  // namespace deskbox::network
