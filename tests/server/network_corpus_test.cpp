// Replays the egress parsers' fuzz seed corpus (server/network/fuzz/corpus) through the fuzz
// target's own checks, so every build exercises them without clang, and checks what the seeds
// made by real clients are read as.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "server/network/dns_message.hpp"
#include "server/network/sniff.hpp"
#include "tests/support/corpus_replay.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox::network {
namespace {

namespace fs = std::filesystem;

std::string seed(const std::string& name) {
    std::ifstream in(fs::path(deskbox::test_paths::source("server/network/fuzz/corpus")) / name,
                     std::ios::binary);
    std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (bytes.empty()) throw std::runtime_error("no seed " + name);
    return bytes.substr(1);  // byte 0 picks the parser
}

TEST(EgressCorpus, EverySeedPassesTheFuzzChecks) {
    EXPECT_GE(test::replay_corpus(deskbox::test_paths::source("server/network/fuzz/corpus")), 15u);
}

TEST(EgressCorpus, SeedsFromRealClientsReadAsTheyShould) {
    EXPECT_EQ(sniff_client_start(seed("sniff-tls13-sni.bin")).name, "example.org");
    EXPECT_EQ(sniff_client_start(seed("sniff-tls12-sni.bin")).name, "www.example.org");
    auto no_sni = sniff_client_start(seed("sniff-tls-no-sni.bin"));
    EXPECT_TRUE(no_sni.complete);
    EXPECT_FALSE(no_sni.name);
    EXPECT_EQ(sniff_client_start(seed("sniff-http.bin")).name, "example.org");
    EXPECT_EQ(sniff_client_start(seed("sniff-http-ipv6.bin")).literal, "2001:db8::1");
    EXPECT_EQ(sniff_client_start(seed("sniff-http2.bin")).protocol, WireProtocol::other);
    auto q = parse_dns_query(seed("dns-query-a.bin"));
    ASSERT_TRUE(q);
    EXPECT_EQ(q->name, "example.org");
    EXPECT_TRUE(parse_dns_query(seed("dns-query-edns.bin")));
}

}  // namespace
}  // namespace deskbox::network
