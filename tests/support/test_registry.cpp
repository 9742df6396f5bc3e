#include "tests/support/test_registry.hpp"

#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "server/network/netns.hpp"
#include "server/network/rtnetlink.hpp"
#include "tests/support/test_internet.hpp"

namespace deskbox::test {

struct TestRegistry::Impl {
    int x = 0;
    TempDir dir{"deskbox-test-registry"};
    network::NetworkNamespace ns;
    ChildProcess registry;

    ~Impl() { registry.terminate(std::chrono::seconds(2)); }
    std::string ip(int host) const {
        return "198.19." + std::to_string(x) + "." + std::to_string(host);
    }
};

TestRegistry::TestRegistry() : impl_(std::make_unique<Impl>()) {
    std::mt19937 random{std::random_device{}()};
    for (int attempt = 0; attempt < 64 && impl_->x == 0; ++attempt) {
        int x = 1 + static_cast<int>(random() % 254);
        if (!host_has_subnet(198, 19, static_cast<unsigned>(x))) impl_->x = x;
    }
    if (impl_->x == 0) throw std::runtime_error("test registry: no free 198.19.X.0/24");
    impl_->ns = network::NetworkNamespace::create();
    {
        network::RtNetlink host;
        host.add_veth(host_side_link(), "eth0", impl_->ns.fd());
        host.add_address(host_side_link(), impl_->ip(1), 24);
        host.set_up(host_side_link());
    }
    impl_->ns.run([&] {
        network::RtNetlink nl;
        nl.set_up("lo");
        nl.add_address("eth0", impl_->ip(2), 24);
        nl.set_up("eth0");
    });
    const auto config = impl_->dir.path() / "config.yml";
    std::ofstream(config) << "version: 0.1\n"
                             "log:\n  level: warn\n"
                             "storage:\n  filesystem:\n    rootdirectory: "
                          << (impl_->dir.path() / "data").string()
                          << "\n  delete:\n    enabled: true\n"
                             "http:\n  addr: "
                          << address() << "\n  secret: deskbox-test-registry\n";
    SpawnOptions spawn;
    spawn.argv = {"docker-registry", "serve", config.string()};
    spawn.netns_fd = impl_->ns.fd();
    spawn.stdout_to_null = true;
    spawn.stderr_to_null = true;
    impl_->registry = ChildProcess::spawn(spawn);
    // Ready once /v2/ answers from the host's side, through the veth.
    for (int i = 0; i < 200; ++i) {
        auto r = run_process({"curl", "-sf", "-m", "2", "http://" + address() + "/v2/"},
                             std::chrono::seconds(5));
        if (r.status.exit_code == 0) return;
        if (!impl_->registry.running()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error(
        "test registry: docker-registry did not answer (is the docker-registry package "
        "installed?)");
}

TestRegistry::~TestRegistry() = default;

std::string TestRegistry::address() const {
    return impl_->ip(2) + ":5000";
}
std::string TestRegistry::down_address() const {
    return impl_->ip(2) + ":5001";
}
std::string TestRegistry::host_side_link() const {
    return "dbxreg" + std::to_string(impl_->x);
}
int TestRegistry::pid() const {
    return impl_->registry.pid();
}

void TestRegistry::stop() {
    impl_->registry.terminate(std::chrono::seconds(2));
}

}  // namespace deskbox::test
