// An image registry of the test's own: the distribution registry (Debian's docker-registry, API
// v2, plain HTTP) in a network namespace the test makes, reached from the host only through a
// veth pair with test addresses in 198.19.X.0/24 (benchmarking, so nothing real is reached;
// TestInternet picks 198.18.X.0/24, so the two never collide). The registry
// listens on `address()` (198.19.X.2:5000); 198.19.X.2:5001 refuses connections (an allowed
// registry that is down). Everything goes with the object: the registry process, its storage
// and the namespace (with it the veth pair).
#pragma once

#include <memory>
#include <string>

namespace deskbox::test {

class TestRegistry {
  public:
    TestRegistry();  // throws std::runtime_error if the registry does not answer within 20 s
    ~TestRegistry();
    TestRegistry(const TestRegistry&) = delete;
    TestRegistry& operator=(const TestRegistry&) = delete;

    std::string address() const;       // "198.19.X.2:5000", as a --template-registry names it
    std::string down_address() const;  // "198.19.X.2:5001": nothing listens there
    std::string host_side_link() const;
    int pid() const;  // the registry's process
    // Ends the registry's process; its namespace stays, so address() refuses connections (a
    // registry that went down, without any packet leaving for an address no one owns).
    void stop();

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::test
