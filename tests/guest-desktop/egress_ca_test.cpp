// The egress CA in a guest's trust stores: PEM blocks and bundles as text (common/pem.hpp),
// Firefox's policies merged, and the real `deskbox-agent --install-egress-ca` on a root tree of
// the test's own, as deskboxd runs it on a container's rootfs (chrooted, as an unprivileged id);
// and the agent refusing to start when the CA it is told of is not in the bundle.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/child_process.hpp"
#include "common/pem.hpp"
#include "common/temp_dir.hpp"
#include "guest-desktop/services/egress_ca.hpp"
#include "tests/support/test_ca.hpp"
#include "tests/support/test_paths.hpp"

namespace deskbox {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kCertA = "-----BEGIN CERTIFICATE-----\nQUFB\nQkJC\n-----END CERTIFICATE-----\n";
const std::string kCertB = "-----BEGIN CERTIFICATE-----\nQ0ND\n-----END CERTIFICATE-----\n";

std::string text_of(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(Pem, CertificatesAreNormalisedAndAnythingElseIsRefused) {
    const auto blocks = pem_certificates("\n" + kCertA + "\r\n  \n" + kCertB);
    ASSERT_EQ(blocks.size(), 2u);
    EXPECT_EQ(blocks[0], kCertA);
    EXPECT_EQ(blocks[1], kCertB);
    // CRLF lines and trailing spaces, a missing last newline: the same block.
    EXPECT_EQ(pem_certificates("-----BEGIN CERTIFICATE-----\r\nQUFB  \r\nQkJC\r\n"
                               "-----END CERTIFICATE-----"),
              std::vector<std::string>{kCertA});
    for (const std::string& bad :
         {std::string(), std::string("  \n"),
          kCertA + "-----BEGIN PRIVATE KEY-----\nQUFB\n"
                   "-----END PRIVATE KEY-----\n",
          std::string("-----BEGIN CERTIFICATE-----\nQUFB\n"),
          std::string("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
          std::string("-----BEGIN CERTIFICATE-----\nQU FB\n-----END CERTIFICATE-----\n"),
          "garbage\n" + kCertA})
        EXPECT_THROW(pem_certificates(bad), std::invalid_argument) << bad;
}

TEST(Pem, ABundleGetsEachCertificateOnceAndOnALineOfItsOwn) {
    const std::string bundle = "first\nlast line without newline";
    const std::string once = bundle_with(bundle, {kCertA, kCertB});
    EXPECT_EQ(once, bundle + "\n" + kCertA + kCertB);
    EXPECT_EQ(bundle_with(once, {kCertA, kCertB}), once);
    EXPECT_EQ(bundle_with("", {kCertA}), kCertA);
    EXPECT_TRUE(bundle_holds(once, kCertB));
    // Inside another line it does not count.
    EXPECT_FALSE(bundle_holds("x" + kCertA, kCertA));
    EXPECT_EQ(bundle_with("x" + kCertA, {kCertA}), "x" + kCertA + kCertA);
}

TEST(FirefoxPolicies, TheCaIsAddedOnceAndEveryOtherPolicyKept) {
    const json template_policies = {
        {"policies",
         {{"DisableTelemetry", true},
          {"Certificates", {{"Install", {"/other.pem"}}, {"ImportEnterpriseRoots", false}}}}}};
    const std::vector<std::string> two = {"/usr/local/share/deskbox/egress-ca-1.pem",
                                          "/usr/local/share/deskbox/egress-ca-2.pem"};
    const json merged = services::firefox_policies_with(template_policies, two);
    EXPECT_EQ(merged["policies"]["DisableTelemetry"], true);
    EXPECT_EQ(merged["policies"]["Certificates"]["Install"], json({"/other.pem", two[0], two[1]}));
    EXPECT_EQ(merged["policies"]["Certificates"]["ImportEnterpriseRoots"], true);
    EXPECT_EQ(services::firefox_policies_with(merged, two), merged);
    // A shorter list drops our entries past it, and the path an older install named.
    json older = merged;
    older["policies"]["Certificates"]["Install"].push_back("/opt/deskbox/egress-ca.pem");
    EXPECT_EQ(
        services::firefox_policies_with(
            older, {two[0]}, "/opt/deskbox/egress-ca.pem")["policies"]["Certificates"]["Install"],
        json({"/other.pem", two[0]}));
    const json expected_alone = {
        {"policies", {{"Certificates", {{"Install", {two[0]}}, {"ImportEnterpriseRoots", true}}}}}};
    for (const json& odd : {json(), json::array(), json({{"policies", "x"}}),
                            json({{"policies", {{"Certificates", {{"Install", "x"}}}}}})})
        EXPECT_EQ(services::firefox_policies_with(odd, {two[0]}), expected_alone) << odd.dump();
}

// The real helper, run as deskboxd runs it on a container's rootfs: chrooted into `root`, as
// the id that owns it there.
RunResult install_into(const fs::path& root, const fs::path& ca_file) {
    return run_process(
        {test_paths::kAgent, "--install-egress-ca", ca_file.string(), "--as",
         "/opt/deskbox/egress-ca.pem", "--root", root.string(), "--uid", "4321", "--gid", "4321"},
        std::chrono::seconds(30));
}

class InstallEgressCa : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root (chroot)";
        ca_ = test::make_test_ca(dir_.path());
        fs::create_directories(root_);
    }
    // Owned by the unprivileged id the install runs as, like a guest's tree by its root.
    void own_root() {
        for (const auto& entry : fs::recursive_directory_iterator(root_))
            ::lchown(entry.path().c_str(), 4321, 4321);
        ::lchown(root_.c_str(), 4321, 4321);
    }
    TempDir dir_{"deskbox-egress-ca"};
    fs::path root_ = dir_.path() / "root";
    test::TestCa ca_;
};

TEST_F(InstallEgressCa, MakesWhatIsMissingAppendsOnceAndMergesFirefoxPolicies) {
    const std::string pem = pem_certificates(ca_.ca_text()).at(0);
    // A template with a bundle, Firefox policies of its own and an ESR distribution file.
    fs::create_directories(root_ / "etc/ssl/certs");
    std::ofstream(root_ / "etc/ssl/certs/ca-certificates.crt") << kCertB;
    fs::create_directories(root_ / "etc/firefox/policies");
    std::ofstream(root_ / "etc/firefox/policies/policies.json")
        << R"({"policies": {"DisableTelemetry": true}})";
    fs::create_directories(root_ / "usr/share/firefox-esr/distribution");
    fs::create_directories(root_ / "usr/lib/firefox-esr");
    fs::create_directory_symlink("../../share/firefox-esr/distribution",
                                 root_ / "usr/lib/firefox-esr/distribution");
    std::ofstream(root_ / "usr/share/firefox-esr/distribution/policies.json") << "{}";
    own_root();

    auto first = install_into(root_, ca_.ca_pem);
    ASSERT_EQ(first.status.exit_code, 0) << first.err << first.out;
    const std::string bundle = text_of(root_ / "etc/ssl/certs/ca-certificates.crt");
    EXPECT_EQ(bundle, kCertB + pem);
    EXPECT_EQ(text_of(root_ / "usr/local/share/ca-certificates/deskbox-egress.crt"), pem);
    const json policies =
        json::parse(text_of(root_ / "etc/firefox/policies/policies.json"), nullptr, false);
    EXPECT_EQ(policies["policies"]["DisableTelemetry"], true) << policies.dump();
    EXPECT_EQ(policies["policies"]["Certificates"]["Install"],
              json({"/usr/local/share/deskbox/egress-ca-1.pem"}));
    EXPECT_EQ(text_of(root_ / "usr/local/share/deskbox/egress-ca-1.pem"), pem);
    EXPECT_EQ(policies["policies"]["Certificates"]["ImportEnterpriseRoots"], true);
    const json distribution = json::parse(
        text_of(root_ / "usr/share/firefox-esr/distribution/policies.json"), nullptr, false);
    EXPECT_EQ(distribution["policies"]["Certificates"]["Install"],
              json({"/usr/local/share/deskbox/egress-ca-1.pem"}));
    // What it wrote belongs to the id it ran as (the guest's root), readable by everyone.
    struct stat st {};
    ASSERT_EQ(::stat((root_ / "usr/local/share/ca-certificates").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_mode & 0777, 0755u);
    ASSERT_EQ(::stat((root_ / "etc/ssl/certs/ca-certificates.crt").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_mode & 0777, 0644u);

    // Again (a copy of a saved layer, a second boot of a disk): nothing changes.
    auto again = install_into(root_, ca_.ca_pem);
    ASSERT_EQ(again.status.exit_code, 0) << again.err;
    EXPECT_NE(again.out.find("everything was in place"), std::string::npos) << again.out;
    EXPECT_EQ(text_of(root_ / "etc/ssl/certs/ca-certificates.crt"), bundle);
}

TEST_F(InstallEgressCa, ATemplateWithoutTrustStoresGetsThemAndABrokenPolicyIsKeptAside) {
    fs::create_directories(root_ / "etc/firefox/policies");
    std::ofstream(root_ / "etc/firefox/policies/policies.json") << "{not json";
    own_root();
    auto result = install_into(root_, ca_.ca_pem);
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(text_of(root_ / "etc/ssl/certs/ca-certificates.crt"),
              pem_certificates(ca_.ca_text()).at(0));
    EXPECT_EQ(text_of(root_ / "etc/firefox/policies/policies.json.deskbox-unreadable"),
              "{not json");
    EXPECT_NE(result.out.find("moved to"), std::string::npos) << result.out;
    EXPECT_TRUE(json::parse(text_of(root_ / "etc/firefox/policies/policies.json"), nullptr, false)
                    .contains("policies"));
    EXPECT_FALSE(fs::exists(root_ / "usr/lib/firefox-esr")) << "no Firefox, no distribution file";
}

TEST_F(InstallEgressCa, HostileLinksInTheTreeResolveInsideIt) {
    // A saved layer may hold anything the sandbox made: links to the host's files. Chrooted,
    // they name the tree's own paths (and the id it runs as could not write the host's anyway).
    const fs::path outside = dir_.path() / "outside";
    const fs::path inside = root_ / outside.relative_path();
    for (const auto& dir : {outside, inside}) {
        fs::create_directories(dir);
        std::ofstream(dir / "ca-certificates.crt") << "bundle\n";
    }
    fs::create_directories(root_ / "etc/ssl");
    fs::create_directory_symlink(outside, root_ / "etc/ssl/certs");
    fs::create_directories(root_ / "usr/local/share");
    fs::create_directory_symlink(outside, root_ / "usr/local/share/ca-certificates");
    own_root();
    auto result = install_into(root_, ca_.ca_pem);
    ASSERT_EQ(result.status.exit_code, 0) << result.err;
    EXPECT_EQ(text_of(outside / "ca-certificates.crt"), "bundle\n");
    EXPECT_FALSE(fs::exists(outside / "deskbox-egress.crt"));
    const std::string pem = pem_certificates(ca_.ca_text()).at(0);
    EXPECT_EQ(text_of(inside / "ca-certificates.crt"), "bundle\n" + pem);
    EXPECT_EQ(text_of(inside / "deskbox-egress.crt"), pem);
}

TEST_F(InstallEgressCa, RefusesAnythingButCertificates) {
    // A CA's private key given by mistake must never reach a guest.
    const fs::path both = dir_.path() / "both.pem";
    std::ofstream(both) << ca_.ca_text() << text_of(ca_.ca_key);
    own_root();
    auto result = install_into(root_, both);
    EXPECT_EQ(result.status.exit_code, 1) << result.out;
    EXPECT_NE(result.err.find("only PEM certificates"), std::string::npos) << result.err;
    EXPECT_FALSE(fs::exists(root_ / "etc"));
}

TEST_F(InstallEgressCa, TheAgentRefusesToStartWhenTheCaItIsToldOfIsNotInstalled) {
    // The host's bundle does not hold the test's CA: as in a guest whose install did not run.
    SpawnOptions agent;
    agent.argv = {test_paths::kAgent, "--channel", "unix-listen:" + (dir_.path() / "s").string()};
    agent.env_overrides[services::kEgressCaEnv] = ca_.ca_pem.string();
    auto refused = run_process(agent, std::chrono::seconds(30));
    EXPECT_EQ(refused.status.exit_code, 1) << refused.err;
    EXPECT_NE(refused.err.find("the egress CA is not installed"), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find(services::kCaBundlePath), std::string::npos) << refused.err;
    EXPECT_FALSE(fs::exists(dir_.path() / "s")) << "the agent got as far as its channel";
}

}  // namespace
}  // namespace deskbox
