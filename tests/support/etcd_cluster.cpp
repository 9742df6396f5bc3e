#include "tests/support/etcd_cluster.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "common/random.hpp"
#include "common/unique_fd.hpp"
#include "server/client/api_client.hpp"

namespace deskbox::test {
namespace {

// The kernel hands out ports for bind(0) and outgoing connections from the ephemeral range, so
// a port below it is never taken by accident between our pick and etcd's bind (a free port taken
// from that range was: another test's connection got it first). Test processes that pick from
// here coordinate through a claim per port, held while the cluster lives.
int ephemeral_low() {
    std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
    int low = 32768;
    in >> low;
    return low;
}

bool bindable(int port) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int on = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));  // as etcd's listener
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    return fd && ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

}  // namespace

ReservedPort ReservedPort::take() {
    const int low = 10000, high = std::max(low + 1000, ephemeral_low()) - 1;
    for (int attempt = 0; attempt < 2000; ++attempt) {
        const int port = low + static_cast<int>(random::value<std::uint32_t>() %
                                                static_cast<std::uint32_t>(high - low + 1));
        // The claim is an abstract unix socket's name: one holder at a time, gone with the
        // process, no file left behind.
        UniqueFd claim(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un name{};
        name.sun_family = AF_UNIX;
        const std::string claim_name = "deskbox-test-port-" + std::to_string(port);
        std::memcpy(name.sun_path + 1, claim_name.data(), claim_name.size());
        const auto length =
            static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + claim_name.size());
        if (!claim || ::bind(claim.get(), reinterpret_cast<sockaddr*>(&name), length) != 0)
            continue;
        if (!bindable(port)) continue;
        ReservedPort out;
        out.port_ = port;
        out.claim_ = std::move(claim);
        return out;
    }
    throw std::runtime_error("no free loopback port below the ephemeral range");
}

namespace {

std::string url(int port) {
    return "http://127.0.0.1:" + std::to_string(port);
}

}  // namespace

EtcdCluster::EtcdCluster(int members)
    : dir_(std::filesystem::exists("/dev/shm") ? "/dev/shm/deskbox-etcd" : "deskbox-etcd"),
      token_("deskbox-test-" + random::hex(6)) {
    for (int i = 0; i < members; ++i) {
        auto member = std::make_unique<Member>();
        member->name = "m" + std::to_string(i);
        member->client_port = ReservedPort::take();
        member->peer_port = ReservedPort::take();
        member->data_dir = dir_.path() / (member->name + ".data");
        member->log_file = dir_.path() / (member->name + ".log");
        if (!initial_cluster_.empty()) initial_cluster_ += ",";
        initial_cluster_ += member->name + "=" + url(member->peer_port.port());
        members_.push_back(std::move(member));
    }
    for (auto& member : members_) start(*member, true);
    wait_healthy();
}

EtcdCluster::~EtcdCluster() {
    for (auto& member : members_) {
        if (member->running) ::kill(member->process.pid(), SIGCONT);
        member->process.terminate(std::chrono::seconds(5));
    }
}

void EtcdCluster::start(Member& member, bool initial) {
    SpawnOptions o;
    o.argv = {"etcd", "--name", member.name, "--data-dir", member.data_dir.string(),
              "--listen-client-urls", url(member.client_port.port()), "--advertise-client-urls",
              url(member.client_port.port()), "--listen-peer-urls", url(member.peer_port.port()),
              "--initial-advertise-peer-urls", url(member.peer_port.port()), "--initial-cluster",
              initial_cluster_, "--initial-cluster-token", token_, "--initial-cluster-state",
              initial ? "new" : "existing",
              // Loopback: a leader's loss is noticed in half a second, not the default 1 s+.
              "--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "warn"};
    o.stdout_to_null = true;
    o.stderr_file = member.log_file.string();
    o.parent_death_signal = SIGKILL;
    member.process = ChildProcess::spawn(o);
    member.running = true;
}

std::vector<std::string> EtcdCluster::endpoints() const {
    std::vector<std::string> out;
    for (const auto& member : members_) out.push_back(url(member->client_port.port()));
    return out;
}

std::string EtcdCluster::endpoint_list() const {
    std::string out;
    for (const auto& endpoint : endpoints()) out += (out.empty() ? "" : ",") + endpoint;
    return out;
}

std::string EtcdCluster::endpoint(int member) const {
    return url(members_.at(member)->client_port.port());
}

void EtcdCluster::kill(int member) {
    auto& m = *members_.at(member);
    m.process.signal(SIGKILL);
    m.process.wait();
    m.running = false;
}

void EtcdCluster::restart(int member) {
    auto& m = *members_.at(member);
    if (m.running) kill(member);
    start(m, false);
}

void EtcdCluster::pause(int member) {
    members_.at(member)->process.signal(SIGSTOP);
}
void EtcdCluster::resume(int member) {
    members_.at(member)->process.signal(SIGCONT);
}

void EtcdCluster::wait_healthy(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        bool all = true;
        for (const auto& member : members_) {
            if (!member->running) continue;
            client::ClientOptions o;
            o.server = url(member->client_port.port());
            o.connect_timeout = o.request_timeout = std::chrono::seconds(1);
            try {
                auto answer = client::ApiClient(o).send(client::Method::get, "/health");
                if (answer.body.find("\"health\":\"true\"") == std::string::npos) all = false;
            } catch (const client::ConnectionError&) {
                all = false;
            }
        }
        if (all) return;
        if (std::chrono::steady_clock::now() >= deadline)
            throw std::runtime_error("etcd did not become healthy:\n" + logs());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

std::string EtcdCluster::logs() const {
    std::string out;
    for (const auto& member : members_) {
        std::ifstream in(member->log_file);
        out += "--- " + member->name + "\n" +
               std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    return out;
}

}  // namespace deskbox::test
