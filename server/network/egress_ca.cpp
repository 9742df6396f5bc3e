#include "server/network/egress_ca.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <system_error>

#include "common/atomic_file.hpp"
#include "common/random.hpp"
#include "common/unique_fd.hpp"

namespace deskbox::network {
namespace {

using std::chrono::system_clock;
using namespace std::chrono_literals;

constexpr auto kCaLifetime = std::chrono::hours(24 * 3650);
constexpr auto kLeafLifetime = std::chrono::hours(24 * 30);
// Clocks of clients a little behind ours still accept a fresh certificate.
constexpr auto kBackdate = 1h;
// A cached leaf is replaced this long before it expires, so no handshake gets one about to.
constexpr auto kLeafRenewal = std::chrono::hours(24);
constexpr std::size_t kMaxLeafName = 253;
constexpr std::size_t kMaxCommonName = 64;  // ub-common-name (RFC 5280)

// sk_X509_free is a macro; the stack only: SSL_*_use_cert_and_key took references of their own.
void free_egress_ca_chain(STACK_OF(X509) * chain) {
    sk_X509_free(chain);
}

[[noreturn]] void throw_egress_ca_error(const std::string& what) {
    throw std::runtime_error("egress CA: " + what + ": " + openssl_errors());
}

// Never prompt on a terminal for an encrypted key: deskboxd's keys are not encrypted.
int refuse_egress_ca_passphrase(char*, int, int, void*) {
    return -1;
}

std::string read_egress_ca_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::system_error(errno, std::generic_category(),
                                "egress CA: cannot open " + path.string());
    std::string data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad())
        throw std::system_error(errno, std::generic_category(),
                                "egress CA: cannot read " + path.string());
    return data;
}

BioPtr egress_ca_read_bio(const std::string& data) {
    BioPtr bio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
    if (!bio) throw_egress_ca_error("BIO_new_mem_buf");
    return bio;
}

std::string pem_of_bio(BIO* bio) {
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    return std::string(data, static_cast<std::size_t>(size));
}

std::string pem_of_certificate(X509* certificate) {
    BioPtr bio(BIO_new(BIO_s_mem()));
    if (!bio || PEM_write_bio_X509(bio.get(), certificate) != 1)
        throw_egress_ca_error("PEM_write_bio_X509");
    return pem_of_bio(bio.get());
}

std::string pem_of_private_key(EVP_PKEY* key) {
    BioPtr bio(BIO_new(BIO_s_mem()));
    if (!bio ||
        PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
        throw_egress_ca_error("PEM_write_bio_PrivateKey");
    return pem_of_bio(bio.get());
}

EvpPkeyPtr new_p256_key() {
    EvpPkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
    if (!key) throw_egress_ca_error("generating a P-256 key");
    return key;
}

void set_certificate_time(ASN1_TIME* field, system_clock::time_point when) {
    if (!ASN1_TIME_set(field, system_clock::to_time_t(when)))
        throw_egress_ca_error("ASN1_TIME_set");
}

// A v3 certificate for `key` with a random 128-bit serial and the given validity; names,
// extensions and the signature are the caller's.
X509Ptr start_certificate(EVP_PKEY* key, system_clock::time_point not_before,
                          system_clock::time_point not_after) {
    X509Ptr certificate(X509_new());
    if (!certificate || !X509_set_version(certificate.get(), X509_VERSION_3))
        throw_egress_ca_error("X509_new");
    // 128 bits with the top one set: positive, never zero, 16 bytes (RFC 5280 allows 20).
    OpenSslPtr<BIGNUM, BN_free> serial(BN_new());
    if (!serial || !BN_rand(serial.get(), 128, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ANY) ||
        !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(certificate.get())))
        throw_egress_ca_error("making a serial number");
    set_certificate_time(X509_getm_notBefore(certificate.get()), not_before);
    set_certificate_time(X509_getm_notAfter(certificate.get()), not_after);
    if (!X509_set_pubkey(certificate.get(), key)) throw_egress_ca_error("X509_set_pubkey");
    return certificate;
}

void add_name_entry(X509_NAME* name, const char* field, const std::string& value) {
    if (!X509_NAME_add_entry_by_txt(name, field, MBSTRING_ASC,
                                    reinterpret_cast<const unsigned char*>(value.data()),
                                    static_cast<int>(value.size()), -1, 0))
        throw_egress_ca_error(std::string("setting the subject's ") + field);
}

// One extension from OpenSSL's configuration syntax (fixed strings only: nothing a sandbox
// chose goes through this parser).
void add_extension(X509* certificate, X509V3_CTX* context, int nid, const char* value) {
    OpenSslPtr<X509_EXTENSION, X509_EXTENSION_free> extension(
        X509V3_EXT_conf_nid(nullptr, context, nid, value));
    if (!extension || !X509_add_ext(certificate, extension.get(), -1))
        throw_egress_ca_error(std::string("adding ") + OBJ_nid2sn(nid) + " " + value);
}

void sign_certificate(X509* certificate, EVP_PKEY* key) {
    if (X509_sign(certificate, key, EVP_sha256()) <= 0) throw_egress_ca_error("X509_sign");
}

system_clock::time_point certificate_not_after(const X509* certificate) {
    std::tm tm{};
    if (!ASN1_TIME_to_tm(X509_get0_notAfter(certificate), &tm))
        throw_egress_ca_error("reading notAfter");
    return system_clock::from_time_t(timegm(&tm));
}

struct CaPair {
    X509Ptr certificate;
    EvpPkeyPtr key;
};

CaPair create_ca(system_clock::time_point now) {
    CaPair ca{nullptr, new_p256_key()};
    ca.certificate = start_certificate(ca.key.get(), now - kBackdate, now + kCaLifetime);
    X509* certificate = ca.certificate.get();
    X509_NAME* subject = X509_get_subject_name(certificate);
    // The random id tells one deskboxd's CA from another's in a trust store.
    add_name_entry(subject, "CN", "deskbox egress CA " + random::hex(4));
    add_name_entry(subject, "O", "deskbox");
    if (!X509_set_issuer_name(certificate, subject)) throw_egress_ca_error("X509_set_issuer_name");
    X509V3_CTX context;
    X509V3_set_ctx(&context, certificate, certificate, nullptr, nullptr, 0);
    add_extension(certificate, &context, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    add_extension(certificate, &context, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_extension(certificate, &context, NID_subject_key_identifier, "hash");
    sign_certificate(certificate, ca.key.get());
    return ca;
}

EvpPkeyPtr parse_ca_key(const std::filesystem::path& path) {
    const std::string data = read_egress_ca_file(path);
    BioPtr bio = egress_ca_read_bio(data);
    EvpPkeyPtr key(
        PEM_read_bio_PrivateKey(bio.get(), nullptr, refuse_egress_ca_passphrase, nullptr));
    if (!key) throw_egress_ca_error(path.string() + ": not a PEM private key");
    return key;
}

X509Ptr parse_ca_certificate(const std::filesystem::path& path) {
    const std::string data = read_egress_ca_file(path);
    BioPtr bio = egress_ca_read_bio(data);
    X509Ptr certificate(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!certificate) throw_egress_ca_error(path.string() + ": not a PEM certificate");
    return certificate;
}

void make_private_directory(const std::filesystem::path& dir) {
    if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path());
    if (::mkdir(dir.c_str(), 0700) == 0) {
        // The umask may have narrowed it; 0700 is what deskboxd needs and all it grants.
        if (::chmod(dir.c_str(), 0700) != 0)
            throw std::system_error(errno, std::generic_category(),
                                    "egress CA: cannot chmod " + dir.string());
    } else if (errno != EEXIST) {
        throw std::system_error(errno, std::generic_category(),
                                "egress CA: cannot create " + dir.string());
    }
}

// Temporaries of atomic_file::write (".ca.key.<hex>.tmp") that a kill left behind: one may hold
// a key that never became the CA's.
void remove_stale_temporaries(const std::filesystem::path& dir) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string file = entry.path().filename().string();
        const bool ours = file.starts_with(".ca.key.") || file.starts_with(".ca.pem.");
        if (ours && file.ends_with(".tmp")) std::filesystem::remove(entry.path());
    }
}

[[noreturn]] void reject_leaf_name(const std::string& why) {
    throw std::invalid_argument("egress CA: leaf name: " + why);
}

// True for an IP literal, false for a DNS name; throws for anything else. The name is never
// quoted in errors: it comes from a sandbox (SNI), bytes of its choice.
bool check_leaf_name(const std::string& name) {
    if (name.empty()) reject_leaf_name("empty");
    if (name.size() > kMaxLeafName)
        reject_leaf_name(std::to_string(name.size()) + " bytes, more than 253");
    unsigned char address[sizeof(in6_addr)];
    if (::inet_pton(AF_INET, name.c_str(), address) == 1 ||
        ::inet_pton(AF_INET6, name.c_str(), address) == 1)
        return true;
    std::size_t label_start = 0;
    for (std::size_t i = 0; i <= name.size(); ++i) {
        if (i == name.size() || name[i] == '.') {
            const std::size_t length = i - label_start;
            if (length == 0) reject_leaf_name("empty label at offset " + std::to_string(i));
            if (length > 63)
                reject_leaf_name("label longer than 63 bytes at offset " +
                                 std::to_string(label_start));
            label_start = i + 1;
            continue;
        }
        const unsigned char c = static_cast<unsigned char>(name[i]);
        const bool allowed =
            (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '*';
        if (!allowed) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", c);
            reject_leaf_name(std::string("byte ") + hex + " at offset " + std::to_string(i) +
                             " is not in [a-z0-9.-*]");
        }
    }
    // A wildcard as browsers and OpenSSL's host check take it: the whole first label, over at
    // least two more ("*.example.com", not "*.com" nor "a*.example.com").
    const std::size_t star = name.find('*');
    if (star != std::string::npos &&
        (star != 0 || name.size() < 2 || name[1] != '.' || name.find('*', 1) != std::string::npos ||
         std::count(name.begin(), name.end(), '.') < 2))
        reject_leaf_name("'*' only as the whole first label over two more labels");
    return false;
}

// subjectAltName of the one name, built as a structure (a2i_GENERAL_NAME), not parsed from
// configuration text the name could add entries to.
void add_subject_alt_name(X509* certificate, const std::string& name, bool ip_address,
                          bool critical) {
    OpenSslPtr<GENERAL_NAMES, GENERAL_NAMES_free> names(sk_GENERAL_NAME_new_null());
    GENERAL_NAME* entry = a2i_GENERAL_NAME(nullptr, nullptr, nullptr,
                                           ip_address ? GEN_IPADD : GEN_DNS, name.c_str(), 0);
    if (!names || !entry) {
        GENERAL_NAME_free(entry);
        throw_egress_ca_error("making subjectAltName");
    }
    if (!sk_GENERAL_NAME_push(names.get(), entry)) {
        GENERAL_NAME_free(entry);
        throw_egress_ca_error("making subjectAltName");
    }
    if (X509_add1_ext_i2d(certificate, NID_subject_alt_name, names.get(), critical ? 1 : 0,
                          X509V3_ADD_DEFAULT) != 1)
        throw_egress_ca_error("adding subjectAltName");
}

OpenSslPtr<STACK_OF(X509), free_egress_ca_chain> chain_of(const LeafCertificate& leaf) {
    OpenSslPtr<STACK_OF(X509), free_egress_ca_chain> chain(sk_X509_new_null());
    if (!chain || !sk_X509_push(chain.get(), leaf.issuer.get()))
        throw_egress_ca_error("making the chain");
    return chain;
}

}  // namespace

// OpenSSL's queue of errors for this thread, emptied so the next failure reports only its own.
std::string openssl_errors() {
    std::string reason;
    while (unsigned long code = ERR_get_error()) {
        char text[256];
        ERR_error_string_n(code, text, sizeof text);
        if (!reason.empty()) reason += "; ";
        reason += text;
    }
    return reason.empty() ? "no OpenSSL error recorded" : reason;
}

void use_leaf_certificate(SSL_CTX* context, const LeafCertificate& leaf) {
    auto chain = chain_of(leaf);
    if (SSL_CTX_use_cert_and_key(context, leaf.certificate.get(), leaf.key.get(), chain.get(), 1) !=
        1)
        throw_egress_ca_error("SSL_CTX_use_cert_and_key");
}

void use_leaf_certificate(SSL* ssl, const LeafCertificate& leaf) {
    auto chain = chain_of(leaf);
    if (SSL_use_cert_and_key(ssl, leaf.certificate.get(), leaf.key.get(), chain.get(), 1) != 1)
        throw_egress_ca_error("SSL_use_cert_and_key");
}

std::shared_ptr<EgressCa> EgressCa::load_or_create(const std::filesystem::path& dir,
                                                   EgressCaOptions options) {
    ERR_clear_error();
    make_private_directory(dir);
    // Two creators at once would each rename their own pair in: one at a time, threads and
    // processes alike (the lock goes with the descriptor).
    UniqueFd lock(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!lock || ::flock(lock.get(), LOCK_EX) != 0)
        throw std::system_error(errno, std::generic_category(),
                                "egress CA: cannot lock " + dir.string());
    remove_stale_temporaries(dir);

    const auto key_path = dir / "ca.key";
    const auto certificate_path = dir / "ca.pem";
    CaPair ca;
    if (std::filesystem::exists(key_path)) {
        if (!std::filesystem::exists(certificate_path))
            throw std::runtime_error("egress CA: " + certificate_path.string() +
                                     " is missing beside " + key_path.string() +
                                     " (restore it, or remove both for a new CA)");
        ca.key = parse_ca_key(key_path);
        ca.certificate = parse_ca_certificate(certificate_path);
        if (X509_check_private_key(ca.certificate.get(), ca.key.get()) != 1) {
            ERR_clear_error();
            throw std::runtime_error("egress CA: " + certificate_path.string() +
                                     " is not the certificate of " + key_path.string());
        }
        if (X509_check_ca(ca.certificate.get()) == 0)
            throw std::runtime_error("egress CA: " + certificate_path.string() +
                                     " is not a CA certificate");
    } else {
        // No key: nothing was committed (a ca.pem alone is a creation killed before its key
        // was written, and without the key it can sign nothing).
        const auto now = options.clock ? options.clock() : system_clock::now();
        ca = create_ca(now);
        const atomic_file::Durability durable = atomic_file::Durability::power_loss;
        atomic_file::write(certificate_path, pem_of_certificate(ca.certificate.get()),
                           {0644, durable});
        atomic_file::write(key_path, pem_of_private_key(ca.key.get()), {0600, durable});
    }
    std::string pem = pem_of_certificate(ca.certificate.get());
    return std::make_shared<EgressCa>(dir, std::move(ca.certificate), std::move(ca.key),
                                      std::move(pem), std::move(options));
}

EgressCa::EgressCa(std::filesystem::path dir, X509Ptr certificate, EvpPkeyPtr key,
                   std::string certificate_pem, EgressCaOptions options)
    : dir_(std::move(dir)),
      certificate_(std::move(certificate)),
      key_(std::move(key)),
      certificate_pem_(std::move(certificate_pem)),
      options_(std::move(options)),
      not_after_(certificate_not_after(certificate_.get())) {
    // OpenSSL caches a certificate's extensions on first use; done here, before threads share
    // the CA, the issuing threads only read it.
    X509_check_purpose(certificate_.get(), -1, 0);
}

system_clock::time_point EgressCa::now() const {
    return options_.clock ? options_.clock() : system_clock::now();
}

std::shared_ptr<const LeafCertificate> EgressCa::leaf_for(const std::string& name) {
    const bool ip_address = check_leaf_name(name);
    const auto fresh_enough = [&](const CachedLeaf& cached, system_clock::time_point at) {
        return cached.leaf->not_after - kLeafRenewal > at;
    };
    {
        std::lock_guard lock(mutex_);
        auto found = cache_.find(name);
        if (found != cache_.end() && fresh_enough(found->second, now())) return found->second.leaf;
    }
    // Issued outside the lock: a handshake for a cached name does not wait for another's key
    // generation. Two threads may issue for one name; the first to store wins.
    auto leaf = issue(name, ip_address);
    std::lock_guard lock(mutex_);
    auto found = cache_.find(name);
    if (found != cache_.end() && fresh_enough(found->second, now())) return found->second.leaf;
    if (found == cache_.end() &&
        cache_.size() >= std::max<std::size_t>(options_.cache_capacity, 1)) {
        auto oldest = std::min_element(
            cache_.begin(), cache_.end(),
            [](const auto& a, const auto& b) { return a.second.inserted < b.second.inserted; });
        cache_.erase(oldest);
    }
    cache_[name] = CachedLeaf{leaf, ++insertions_};
    return leaf;
}

std::shared_ptr<const LeafCertificate> EgressCa::issue(const std::string& name,
                                                       bool ip_address) const {
    ERR_clear_error();
    const auto now = this->now();
    if (now >= not_after_)
        throw std::runtime_error("egress CA: " + certificate_path().string() +
                                 " has expired: remove ca.key and ca.pem for a new CA");
    auto leaf = std::make_shared<LeafCertificate>();
    leaf->name = name;
    leaf->key = new_p256_key();
    leaf->not_after = std::min(now + kLeafLifetime, not_after_);
    leaf->certificate = start_certificate(leaf->key.get(), now - kBackdate, leaf->not_after);
    X509* certificate = leaf->certificate.get();
    // The CN is for people reading the certificate; clients match the SAN. A name too long for
    // a CN leaves the subject empty, and then the SAN must be critical (RFC 5280 4.2.1.6).
    const bool with_common_name = name.size() <= kMaxCommonName;
    if (with_common_name) add_name_entry(X509_get_subject_name(certificate), "CN", name);
    if (!X509_set_issuer_name(certificate, X509_get_subject_name(certificate_.get())))
        throw_egress_ca_error("X509_set_issuer_name");
    X509V3_CTX context;
    X509V3_set_ctx(&context, certificate_.get(), certificate, nullptr, nullptr, 0);
    add_extension(certificate, &context, NID_basic_constraints, "critical,CA:FALSE");
    add_extension(certificate, &context, NID_key_usage, "critical,digitalSignature");
    add_extension(certificate, &context, NID_ext_key_usage, "serverAuth");
    add_extension(certificate, &context, NID_subject_key_identifier, "hash");
    add_extension(certificate, &context, NID_authority_key_identifier, "keyid:always");
    add_subject_alt_name(certificate, name, ip_address, !with_common_name);
    sign_certificate(certificate, key_.get());

    if (X509_up_ref(certificate_.get()) != 1) throw_egress_ca_error("X509_up_ref");
    leaf->issuer.reset(certificate_.get());
    leaf->certificate_pem = pem_of_certificate(certificate) + certificate_pem_;
    leaf->key_pem = pem_of_private_key(leaf->key.get());
    return leaf;
}

}  // namespace deskbox::network
