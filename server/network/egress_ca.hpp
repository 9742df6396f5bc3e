// The egress proxy's private CA (issue 31, HTTPS credential rules): deskboxd terminates TLS for
// domains with credential rules, presenting a certificate for the name issued by this CA. The
// key never leaves deskboxd; only ca.pem is given to guests to trust.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace deskbox::network {

// Owners of OpenSSL objects: OpenSslPtr<X509_STORE, X509_STORE_free>. Defined here once for
// the library (its unity batches would see two definitions as a clash).
template <auto Free>
struct OpenSslFree {
    template <typename T>
    void operator()(T* object) const {
        Free(object);
    }
};
template <typename T, auto Free>
using OpenSslPtr = std::unique_ptr<T, OpenSslFree<Free>>;
using X509Ptr = OpenSslPtr<X509, X509_free>;
using EvpPkeyPtr = OpenSslPtr<EVP_PKEY, EVP_PKEY_free>;
using BioPtr = OpenSslPtr<BIO, BIO_free_all>;

// A server certificate for one name, signed by the CA. Immutable once issued: shared between
// threads as shared_ptr<const LeafCertificate>.
struct LeafCertificate {
    std::string name;  // as asked for: a DNS name (maybe "*.x") or an IP literal
    X509Ptr certificate;
    EvpPkeyPtr key;
    X509Ptr issuer;               // the CA's certificate, for the chain a server sends
    std::string certificate_pem;  // the leaf followed by the CA's certificate
    std::string key_pem;          // PKCS#8, unencrypted
    std::chrono::system_clock::time_point not_after;
};

// OpenSSL's queue of errors for this thread as text, emptied so the next failure reports only
// its own.
std::string openssl_errors();

// Makes an SSL_CTX (or one SSL, e.g. from an SNI callback) present `leaf`: certificate, key and
// chain. Throws std::runtime_error with OpenSSL's reason.
void use_leaf_certificate(SSL_CTX* context, const LeafCertificate& leaf);
void use_leaf_certificate(SSL* ssl, const LeafCertificate& leaf);

struct EgressCaOptions {
    // Time as the CA sees it (tests move it forward); empty: the system clock.
    std::function<std::chrono::system_clock::time_point()> clock;
    std::size_t cache_capacity = 1024;  // names whose leaves are kept; the oldest go first
};

class EgressCa {
  public:
    // Loads <dir>/ca.key and <dir>/ca.pem, or creates them: EC P-256 key, self-signed, CA:TRUE
    // critical with pathlen 0, keyUsage keyCertSign+cRLSign critical, CN "deskbox egress CA
    // <random id>", O "deskbox", 10 years. dir is created 0700, ca.key is 0600 and ca.pem 0644,
    // each written atomically and fsynced, ca.pem first: ca.key is what commits a creation, so
    // a kill in between leaves a ca.pem without key, which is replaced. ca.key without ca.pem, a
    // file that does not parse, or a ca.pem that is not a CA or not of ca.key's key throws
    // std::runtime_error naming the file, and nothing is replaced. Creations of one dir are
    // serialised (flock on dir), across threads and processes.
    static std::shared_ptr<EgressCa> load_or_create(const std::filesystem::path& dir,
                                                    EgressCaOptions options = {});

    const std::string& certificate_pem() const { return certificate_pem_; }
    std::filesystem::path certificate_path() const { return dir_ / "ca.pem"; }
    // Non-const only because OpenSSL's calls take X509* even to read (X509_STORE_add_cert,
    // SSL_CTX_add1_chain_cert): never modify it.
    X509* certificate() const { return certificate_.get(); }
    std::chrono::system_clock::time_point not_after() const { return not_after_; }

    // A certificate for `name`: a DNS name, already lower-case, of [a-z0-9.-] and '*' as a whole
    // first label, at most 253 bytes (else std::invalid_argument); or an IPv4/IPv6 literal (IP
    // SAN). SAN is the name only, EKU serverAuth, keyUsage digitalSignature, not a CA, a random
    // 128-bit serial, valid from an hour ago for 30 days (never past the CA), SHA-256, its own
    // P-256 key. Cached and reused until a day before it expires. Thread-safe.
    std::shared_ptr<const LeafCertificate> leaf_for(const std::string& name);

    // Public for make_shared only: use load_or_create.
    EgressCa(std::filesystem::path dir, X509Ptr certificate, EvpPkeyPtr key,
             std::string certificate_pem, EgressCaOptions options);

  private:
    struct CachedLeaf {
        std::shared_ptr<const LeafCertificate> leaf;
        std::uint64_t inserted = 0;  // for evicting the oldest
    };

    std::chrono::system_clock::time_point now() const;
    std::shared_ptr<const LeafCertificate> issue(const std::string& name, bool ip_address) const;

    const std::filesystem::path dir_;
    const X509Ptr certificate_;
    const EvpPkeyPtr key_;
    const std::string certificate_pem_;
    const EgressCaOptions options_;
    std::chrono::system_clock::time_point not_after_;

    std::mutex mutex_;
    std::unordered_map<std::string, CachedLeaf> cache_;
    std::uint64_t insertions_ = 0;
};

}  // namespace deskbox::network
