// deskboxd's flags as pure parsing: the cluster options, the limits, and what they refuse.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "common/temp_dir.hpp"
#include "server/daemon/server_config.hpp"

namespace deskbox::server {
namespace {

std::string refusal(const std::vector<std::string>& args) {
    try {
        parse_server_config(args);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(accepted)";
}

const std::string kSecret = "0123456789abcdef-secret";

// The limits of issue 26 and the header limit its docs named: each flag reaches its option,
// and a bad value is refused naming the flag.
TEST(ServerConfigLimits, LimitFlagsReachTheirOptionsAndBadValuesAreRefused) {
    auto c = parse_server_config(
        {"--max-header-kb", "32", "--disk-overcommit", "1.5", "--egress-half-closed-idle-s", "5"});
    EXPECT_EQ(c.http.max_header_bytes, 32u << 10);
    EXPECT_DOUBLE_EQ(c.manager.disk_overcommit, 1.5);
    EXPECT_EQ(c.manager.network.half_closed_idle, std::chrono::seconds(5));
    EXPECT_DOUBLE_EQ(parse_server_config({}).manager.disk_overcommit, 2.0);
    EXPECT_NE(refusal({"--max-header-kb", "0"}).find("--max-header-kb"), std::string::npos);
    EXPECT_NE(refusal({"--disk-overcommit", "-1"}).find("--disk-overcommit"), std::string::npos);
    EXPECT_NE(refusal({"--disk-overcommit", "2x"}).find("--disk-overcommit"), std::string::npos);
    EXPECT_NE(refusal({"--egress-half-closed-idle-s", "0"}).find("--egress-half-closed-idle-s"),
              std::string::npos);
}

// --container-pool TEMPLATE=N as --microvm-pool: a bad value is refused naming the flag.
TEST(ServerConfigPools, ABadContainerPoolIsRefusedNamingTheFlag) {
    for (const std::string bad : {"minimal", "=2", "minimal=x", "minimal=-1", "minimal=65"})
        EXPECT_EQ(refusal({"--container-pool", bad}).rfind("--container-pool: ", 0), 0u) << bad;
}

// --egress-proxy: the default and named ones; a bad one names the flag, never the password.
TEST(ServerConfigNetwork, EgressProxiesDefaultAndNamed) {
    auto c = parse_server_config({"--egress-proxy", "socks5://10.0.0.1:1080", "--egress-proxy",
                                  "corp=http://u:pw@10.0.0.2:3128", "--egress-proxy",
                                  "lab=socks5://[2001:db8::1]:1080"});
    ASSERT_TRUE(c.manager.network.egress_proxy);
    EXPECT_EQ(c.manager.network.egress_proxy->describe(), "socks5://10.0.0.1:1080");
    ASSERT_EQ(c.manager.network.named_egress_proxies.size(), 2u);
    EXPECT_EQ(c.manager.network.named_egress_proxies.at("corp").describe(),
              "http://u@10.0.0.2:3128");
    EXPECT_EQ(c.manager.network.named_egress_proxies.at("corp").password, "pw");
    for (const std::string bad : {"socks5://proxy.example:1080", "Corp=http://10.0.0.2:3128",
                                  "corp=ftp://10.0.0.2:21", "http://u:pw@10.0.0.2"}) {
        const std::string why = refusal({"--egress-proxy", bad});
        EXPECT_EQ(why.rfind("--egress-proxy: ", 0), 0u) << bad << ": " << why;
        EXPECT_EQ(why.find("pw"), std::string::npos) << why;
    }
}

// --egress-ca-cert: the file's certificates go to the manager (which gives them to every
// sandbox); an unreadable file or one holding anything else (a private key) is refused.
TEST(ServerConfigOptions, EgressCaCertIsReadAndCheckedBeforeTheManagerGetsIt) {
    TempDir dir("deskbox-config-ca");
    const std::string cert = "-----BEGIN CERTIFICATE-----\nQUFB\n-----END CERTIFICATE-----\n";
    std::ofstream(dir.path() / "ca.pem") << cert;
    std::ofstream(dir.path() / "key.pem")
        << cert << "-----BEGIN PRIVATE KEY-----\nQUFB\n-----END PRIVATE KEY-----\n";
    EXPECT_EQ(parse_server_config({"--egress-ca-cert", (dir.path() / "ca.pem").string()})
                  .manager.egress_ca_pem,
              cert);
    EXPECT_EQ(parse_server_config({}).manager.egress_ca_pem, "");
    EXPECT_NE(refusal({"--egress-ca-cert", (dir.path() / "none.pem").string()})
                  .find("--egress-ca-cert: cannot read"),
              std::string::npos);
    const std::string with_key = refusal({"--egress_ca_cert", (dir.path() / "key.pem").string()});
    EXPECT_NE(with_key.find("only PEM certificates"), std::string::npos) << with_key;
}

// One option of each group (HTTP, sandboxes, networks), dashed or underscored, and what is
// none of them.
TEST(ServerConfigOptions, EachGroupTakesItsOptionsInEitherSpellingAndOthersAreUnknown) {
    auto c = parse_server_config({"--listen",
                                  "[::1]:8712",
                                  "--max_handlers",
                                  "9",
                                  "--api-key",
                                  "12345678",
                                  "--state-dir",
                                  "/tmp/s",
                                  "--max-sandboxes",
                                  "3",
                                  "--microvm_pool",
                                  "desktop=2",
                                  "--container-pool",
                                  "minimal=4",
                                  "--container-pool",
                                  "app:v1=1",
                                  "--on-exit",
                                  "kill",
                                  "--default-network",
                                  "false",
                                  "--userns",
                                  "true",
                                  "--egress_max_connections",
                                  "77"});
    EXPECT_EQ(c.http.address, "::1");
    EXPECT_EQ(c.http.port, 8712);
    EXPECT_EQ(c.http.max_handlers, 9u);
    EXPECT_EQ(c.api.api_keys, std::vector<std::string>{"12345678"});
    EXPECT_EQ(c.manager.state_dir, "/tmp/s");
    EXPECT_EQ(c.manager.max_sandboxes, 3u);
    EXPECT_EQ(c.manager.microvm_pool.at("desktop"), 2u);
    EXPECT_EQ(c.manager.container_pool.at("minimal"), 4u);
    EXPECT_EQ(c.manager.container_pool.at("app:v1"), 1u) << "the last '=' splits";
    EXPECT_EQ(c.manager.microvm_pool.count("minimal"), 0u);
    EXPECT_FALSE(c.keep_sandboxes_on_sigterm);
    EXPECT_TRUE(c.manager.user_namespaces);
    EXPECT_EQ(c.egress_max_connections, 77u);
    EXPECT_EQ(refusal({"--threads", "0"}), "--threads: expected an integer in 1..256, got '0'");
    EXPECT_EQ(refusal({"--no-such-flag", "1"}), "unknown option '--no-such-flag'");
}

TEST(ServerConfigCluster, WithoutClusterOptionsThereIsNoCluster) {
    EXPECT_FALSE(parse_server_config({}).cluster);
}

TEST(ServerConfigCluster, FlagsFillTheClusterAndTheAdvertisedAddressDefaultsToTheListenOne) {
    ::unsetenv("DESKBOX_CLUSTER_SECRET");
    auto c = parse_server_config({"--listen", "127.0.0.1:8711", "--cluster",
                                  "etcd=http://10.0.0.1:2379,http://10.0.0.2:2379", "--node-name",
                                  "node-a", "--cluster-secret", kSecret, "--cluster-lease-s", "4",
                                  "--cluster-prefix", "/lab/"});
    ASSERT_TRUE(c.cluster);
    EXPECT_EQ(c.cluster->etcd,
              (std::vector<std::string>{"http://10.0.0.1:2379", "http://10.0.0.2:2379"}));
    EXPECT_EQ(c.cluster->node_name, "node-a");
    EXPECT_EQ(c.cluster->advertise, "http://127.0.0.1:8711");
    EXPECT_EQ(c.cluster->secret, kSecret);
    EXPECT_EQ(c.cluster->lease_ttl, std::chrono::seconds(4));
    EXPECT_EQ(c.cluster->prefix, "/lab/");
    // Port 0: filled in once bound.
    auto any_port = parse_server_config({"--listen", "127.0.0.1:0", "--cluster",
                                         "etcd=http://e:2379", "--cluster-secret", kSecret});
    EXPECT_EQ(any_port.cluster->advertise, "");
    EXPECT_FALSE(any_port.cluster->node_name.empty()) << "the host name";
    EXPECT_EQ(default_advertise("::1", 80), "http://[::1]:80");
}

TEST(ServerConfigCluster, TheSecretComesFromAFileOrTheEnvironment) {
    TempDir dir;
    std::ofstream(dir.path() / "secret") << kSecret << "\n";
    auto c = parse_server_config({"--cluster", "etcd=http://e:2379", "--cluster-secret-file",
                                  (dir.path() / "secret").string()});
    EXPECT_EQ(c.cluster->secret, kSecret) << "without the trailing newline";
    ::setenv("DESKBOX_CLUSTER_SECRET", kSecret.c_str(), 1);
    EXPECT_EQ(parse_server_config({"--cluster", "etcd=http://e:2379"}).cluster->secret, kSecret);
    ::unsetenv("DESKBOX_CLUSTER_SECRET");
}

TEST(ServerConfigCluster, BadClusterOptionsAreRefusedNamingTheOption) {
    ::unsetenv("DESKBOX_CLUSTER_SECRET");
    const std::vector<std::string> etcd = {"--cluster", "etcd=http://e:2379"};
    auto with = [&](std::vector<std::string> more) {
        more.insert(more.begin(), etcd.begin(), etcd.end());
        return more;
    };
    EXPECT_NE(refusal({"--cluster", "http://e:2379", "--cluster-secret", kSecret})
                  .find("--cluster: expected etcd="),
              std::string::npos);
    EXPECT_NE(refusal({"--cluster", "etcd=e:2379", "--cluster-secret", kSecret})
                  .find("not an etcd client URL"),
              std::string::npos);
    EXPECT_NE(refusal(with({})).find("shared secret"), std::string::npos);
    EXPECT_NE(refusal(with({"--cluster-secret", "short"})).find("16+"), std::string::npos);
    EXPECT_NE(
        refusal(with({"--cluster-secret", kSecret, "--node-name", "a/b"})).find("--node-name"),
        std::string::npos);
    EXPECT_NE(refusal(with({"--cluster-secret", kSecret, "--cluster-lease-s", "1"}))
                  .find("--cluster-lease-s"),
              std::string::npos);
    EXPECT_NE(refusal(with({"--cluster-secret", kSecret, "--cluster-prefix", "x"}))
                  .find("--cluster-prefix"),
              std::string::npos);
    EXPECT_NE(refusal(with({"--cluster-secret", kSecret, "--advertise", "10.0.0.1:8700"}))
                  .find("--advertise"),
              std::string::npos);
    // Listening everywhere, the address to advertise cannot be guessed.
    EXPECT_NE(refusal(with({"--cluster-secret", kSecret, "--listen", "0.0.0.0:8700", "--api-key",
                            "a-long-api-key"}))
                  .find("--advertise"),
              std::string::npos);
    // A cluster option without --cluster.
    EXPECT_NE(refusal({"--node-name", "a", "--cluster-secret", kSecret}).find("--cluster etcd="),
              std::string::npos);
}

}  // namespace
}  // namespace deskbox::server
