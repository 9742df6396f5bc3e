// A SandboxManager whose sandboxes run on a runtime::FakeRuntime: an in-process
// agent without a guest, so routing, validation and the API's answers can be tested without
// root, runc or QEMU. The one place tests and the HTTP fuzzer build such a manager, so a
// change in how runtimes reach SandboxManager is made here only.
#pragma once

#include <functional>
#include <memory>

#include "server/runtime/fake_runtime.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::test {

// Sandboxes of the "fake" template from `images` (which must outlive the manager), with a
// closed network; `adjust` may change the options further (limits, timeouts). `network`
// netns gives each sandbox a real container network namespace (needs root), as runc's get.
inline std::unique_ptr<server::SandboxManager> make_fake_sandbox_manager(
    const runtime::FakeTemplate& images,
    const std::function<void(server::ManagerOptions&)>& adjust = {},
    runtime::NetworkAttach network = runtime::NetworkAttach::none) {
    server::ManagerOptions options;
    options.state_dir = images.scratch() / "state";
    options.images_dir = images.images_dir();
    options.template_cache = images.scratch() / "cache";
    options.default_template = "fake";
    options.default_network = network::NetworkPolicy::closed();
    options.default_runtime = "fake";
    if (adjust) adjust(options);
    return std::make_unique<server::SandboxManager>(std::move(options),
                                                    runtime::fake_runtimes(network));
}

}  // namespace deskbox::test
