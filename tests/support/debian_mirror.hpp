// deskboxd flags for builds that fetch from the Debian mirror: where deb.debian.org resolves to
// a non-public address (a TEST-NET mirror on these machines), the network policy must be told
// that address is the internet. Empty when the name does not resolve.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>

#include <string>
#include <vector>

namespace deskbox::test {

inline std::vector<std::string> debian_mirror_flags() {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* found = nullptr;
    if (::getaddrinfo("deb.debian.org", nullptr, &hints, &found) != 0 || !found) return {};
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    ::freeaddrinfo(found);
    return {"--public-range", std::string(text) + "/32"};
}

}  // namespace deskbox::test
