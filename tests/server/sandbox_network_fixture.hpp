// The fixture of the host-side sandbox network tests (sandbox_network_test.cpp,
// sandbox_network_http_test.cpp): SandboxNetworks of the container kind, a test internet in a
// namespace of the test's own (tests/support/test_internet.hpp), and real clients (curl,
// python3) run inside the sandbox's namespace, the one runc joins.
#pragma once

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "server/network/egress_ca.hpp"
#include "server/network/sandbox_network.hpp"
#include "tests/support/host_state.hpp"
#include "tests/support/test_internet.hpp"

namespace deskbox::network {

using namespace std::chrono_literals;
using nlohmann::json;

struct Ran {
    int exit_code;
    std::string out, err;
    std::chrono::milliseconds took;
};

inline Ran run_inside(const std::string& netns_path, std::vector<std::string> argv,
                      std::chrono::milliseconds timeout = 20s) {
    auto ns = NetworkNamespace::open(netns_path);
    SpawnOptions o;
    o.argv = std::move(argv);
    o.netns_fd = ns.fd();
    auto start = std::chrono::steady_clock::now();
    auto r = run_process(o, timeout);
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    return {r.timed_out ? -1 : r.status.exit_code, r.out, r.err, took};
}

// A TCP listener in the host's (the test's) namespace on every address, counting connections:
// sandboxes must never reach it.
class HostListener {
  public:
    HostListener() {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
        ::listen(fd_, 16);
        socklen_t len = sizeof a;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] {
            while (true) {
                int c = ::accept(fd_, nullptr, nullptr);
                if (c < 0) return;
                ++accepted_;
                ::close(c);
            }
        });
    }
    ~HostListener() {
        ::shutdown(fd_, SHUT_RDWR);
        ::close(fd_);
        thread_.join();
    }
    int port() const { return port_; }
    int accepted() const { return accepted_; }

  private:
    int fd_ = -1, port_ = 0;
    std::atomic<int> accepted_{0};
    std::thread thread_;
};

class SandboxNetworkTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
        internet_ = std::make_unique<test::TestInternet>(std::map<std::string, std::string>{
            {"allowed.test", "web"},
            {"other.test", "other"},
            {"a.wild.test", "web"},
            {"b.wild.test", "other"},
            {"lan.test", "lan"},
            {"rebind.test", "127.0.0.1"},
            {"private.test", "10.1.2.3"},
            {"metadata.test", "169.254.169.254"},
        });
        NetworkOptions options;
        options.dns_upstream = internet_->dns_address();
        options.first_bytes_timeout = 500ms;
        // web and other stand for the internet; lan stays what 198.18/15 is (special).
        options.public_ranges = {*parse_ip_range(internet_->web_address()),
                                 *parse_ip_range(internet_->other_address())};
        options.secret_value = [this](const std::string& name) -> std::optional<std::string> {
            std::lock_guard lock(audit_mutex_);
            auto it = secrets_.find(name);
            if (it == secrets_.end()) return std::nullopt;
            return it->second;
        };
        // HTTPS credential rules: the proxy's CA, and servers' certificates from the test CA.
        options.egress_ca = EgressCa::load_or_create(egress_ca_dir_.path());
        options.egress_trust = {internet_->ca_file()};
        options_ = options;
        service_ = std::make_unique<NetworkService>(options);
    }

    std::shared_ptr<SandboxNetwork> make(const nlohmann::json& policy, std::uint64_t kbps = 0) {
        SandboxNetwork::Options o;
        o.sandbox_id = "sb-test";
        o.policy = NetworkPolicy::parse(policy);
        o.kind = SandboxNetwork::Kind::container;
        o.egress_kbps = kbps;
        o.audit = [this](const std::string& kind, const nlohmann::json& detail) {
            std::lock_guard lock(audit_mutex_);
            audit_.push_back(kind + " " + detail.dump());
        };
        return service_->create(o);
    }

    Ran curl(const SandboxNetwork& net, const std::vector<std::string>& args) {
        std::vector<std::string> argv = {"curl", "-sS", "-k", "--max-time", "8", "--noproxy", "*"};
        argv.insert(argv.end(), args.begin(), args.end());
        return run_inside(net.container_netns_path(), argv);
    }
    Ran python(const SandboxNetwork& net, const std::string& code) {
        return run_inside(net.container_netns_path(), {"python3", "-c", code});
    }

    std::string audit_text() {
        std::lock_guard lock(audit_mutex_);
        std::string all;
        for (auto& line : audit_) all += line + "\n";
        return all;
    }
    void expect_reached(const Ran& r, const std::string& address) {
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.out.find("deskbox test host " + address), std::string::npos) << r.out;
    }
    // A connection that must not get anywhere: fails, and fast (a reset, not a timeout).
    void expect_refused(const Ran& r, const std::string& what) {
        EXPECT_NE(r.exit_code, 0) << what << " reached: " << r.out;
        EXPECT_EQ(r.out.find("deskbox test host"), std::string::npos) << what << ": " << r.out;
        EXPECT_LT(r.took, 5s) << what << " took " << r.took.count() << " ms: " << r.err;
    }

    std::unique_ptr<test::TestInternet> internet_;
    TempDir egress_ca_dir_{"deskbox-egress-ca"};
    NetworkOptions options_;
    std::unique_ptr<NetworkService> service_;
    std::mutex audit_mutex_;
    std::vector<std::string> audit_;
    std::map<std::string, std::string> secrets_;  // under audit_mutex_
};

}  // namespace deskbox::network
