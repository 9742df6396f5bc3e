// What a guest is told of the egress CA (SandboxSpec::egress_ca), as pure functions: its
// environment, the microVM's config disk and sandbox record, and the spec's check.
#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.hpp"
#include "server/runtime/guest_env.hpp"
#include "server/runtime/microvm/guest_config.hpp"
#include "server/runtime/microvm/sandbox_files.hpp"

namespace deskbox::runtime {
namespace {

namespace fs = std::filesystem;

SandboxSpec egress_spec(const fs::path& agent_dir) {
    SandboxSpec spec;
    spec.id = "sb-guestenv";
    spec.template_rootfs = "/nonexistent/rootfs";
    spec.state_root = "/nonexistent/state";
    spec.entry = {"/opt/deskbox/bin/deskbox-agent"};
    spec.agent_dir = agent_dir;
    return spec;
}

TEST(GuestEnv, TheEgressCaVariablesComeOnlyWithTheCaAndTheRequestStillWins) {
    SandboxSpec spec = egress_spec("/nonexistent/agent");
    const auto plain = default_guest_env(spec);
    for (const char* name : {"DESKBOX_EGRESS_CA", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE",
                             "SSL_CERT_FILE", "CURL_CA_BUNDLE"})
        EXPECT_EQ(plain.count(name), 0u) << name;
    EXPECT_NE(guest_config(spec).find("DESKBOX_EGRESS_CA=''\n"), std::string::npos);

    spec.egress_ca = true;
    const auto env = default_guest_env(spec);
    EXPECT_EQ(env.at("DESKBOX_EGRESS_CA"), "/opt/deskbox/egress-ca.pem");
    EXPECT_EQ(env.at("NODE_EXTRA_CA_CERTS"), "/opt/deskbox/egress-ca.pem");
    for (const char* name : {"REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"})
        EXPECT_EQ(env.at(name), "/etc/ssl/certs/ca-certificates.crt") << name;
    // The microVM's init reads the CA's guest path; the environment goes after `set --`.
    spec.env["SSL_CERT_FILE"] = "/mine.pem";
    const std::string config = guest_config(spec);
    EXPECT_NE(config.find("\nDESKBOX_EGRESS_CA='/opt/deskbox/egress-ca.pem'\n"), std::string::npos)
        << config;
    EXPECT_NE(config.find("'SSL_CERT_FILE=/mine.pem'"), std::string::npos) << config;
    EXPECT_EQ(config.find("SSL_CERT_FILE=/etc/ssl"), std::string::npos) << config;
}

TEST(GuestEnv, AMicrovmRecordKeepsTheCaAndOlderRecordsHaveNone) {
    SandboxSpec spec = egress_spec("/nonexistent/agent");
    spec.egress_ca = true;
    auto record = spec_to_json(spec);
    EXPECT_TRUE(spec_from_json(record).egress_ca);
    record.erase("egress_ca");
    EXPECT_FALSE(spec_from_json(record).egress_ca);
}

TEST(GuestEnv, ASpecWithTheCaNeedsItAndTheAgentInItsAgentDir) {
    TempDir agent("deskbox-guest-env");
    SandboxSpec spec = egress_spec(agent.path());
    spec.egress_ca = true;
    try {
        validate_spec(spec);
        FAIL() << "no CA in the agent dir, and accepted";
    } catch (const SpecError& e) {
        EXPECT_EQ(e.field(), "egress_ca");
    }
    fs::create_directories(agent.path() / "bin");
    std::ofstream(agent.path() / "bin/deskbox-agent") << "agent";
    std::ofstream(agent.path() / kEgressCaFileName) << "pem";
    EXPECT_NO_THROW(validate_spec(spec));
    spec.agent_dir.clear();
    EXPECT_THROW(validate_spec(spec), SpecError);
}

}  // namespace
}  // namespace deskbox::runtime
