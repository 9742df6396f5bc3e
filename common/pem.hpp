// PEM certificates as text: the egress proxy's CA goes from deskboxd into every guest as PEM, and
// both sides must agree on what one certificate is (the guest appends each to its bundle once,
// recognising it by its exact text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deskbox {

// Each "-----BEGIN CERTIFICATE-----" ... "-----END CERTIFICATE-----" block of `text`, normalised:
// its lines without trailing spaces or CR, "\n" after each. Throws std::invalid_argument when
// there is none, a block is unterminated, holds anything but base64, or text outside the blocks
// is not whitespace (a private key beside the certificate must never reach a guest).
std::vector<std::string> pem_certificates(std::string_view text);

// Whether `bundle` (a CA bundle such as /etc/ssl/certs/ca-certificates.crt) holds `certificate`
// (one block as pem_certificates gives it) as a whole block, line for line.
bool bundle_holds(std::string_view bundle, std::string_view certificate);

// `bundle` with every certificate it does not hold yet appended (after a newline when it does not
// end with one); unchanged when it holds them all.
std::string bundle_with(std::string bundle, const std::vector<std::string>& certificates);

}  // namespace deskbox
