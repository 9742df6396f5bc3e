// A real etcd cluster for tests and benchmarks: N members on free loopback ports, each with a
// data dir under a temp dir in /dev/shm (fsync costs nothing there), fast elections so losing a
// member heals in about a second. Members can be killed, stopped (SIGSTOP) and restarted.
// Everything goes with the object.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"

namespace deskbox::test {

// A loopback TCP port below the kernel's ephemeral range, free when taken and kept from other
// test processes (an abstract unix socket's name) while this object lives, so a server started
// later can bind it.
class ReservedPort {
  public:
    static ReservedPort take();
    int port() const { return port_; }

  private:
    int port_ = 0;
    UniqueFd claim_;
};

class EtcdCluster {
  public:
    // Starts `members` members and waits until the cluster has a leader. Throws
    // std::runtime_error with the members' logs if it does not come up.
    explicit EtcdCluster(int members = 1);
    ~EtcdCluster();
    EtcdCluster(const EtcdCluster&) = delete;
    EtcdCluster& operator=(const EtcdCluster&) = delete;

    int size() const { return static_cast<int>(members_.size()); }
    std::vector<std::string> endpoints() const;  // client URLs, member order
    std::string endpoint_list() const;           // "http://127.0.0.1:P1,http://127.0.0.1:P2"
    std::string endpoint(int member) const;

    void kill(int member);     // SIGKILL, reaped
    void restart(int member);  // starts a killed member again on its data dir
    void pause(int member);    // SIGSTOP
    void resume(int member);   // SIGCONT
    // Waits until every running member reports healthy (a leader exists).
    void wait_healthy(std::chrono::milliseconds timeout = std::chrono::seconds(20)) const;
    std::string logs() const;

  private:
    struct Member {
        std::string name;
        ReservedPort client_port, peer_port;
        std::filesystem::path data_dir, log_file;
        ChildProcess process;
        bool running = false;
    };
    void start(Member& member, bool initial);

    TempDir dir_;
    std::string token_;
    std::string initial_cluster_;
    std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace deskbox::test
