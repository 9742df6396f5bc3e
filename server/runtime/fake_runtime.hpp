// A runtime without a guest, for the HTTP fuzzer and its corpus replay: a "sandbox" is an
// in-process agent on a socketpair that does the handshake, answers screen.sync and refuses
// every other method (the server answers those 502, as for any agent that cannot). Everything
// between a request and the agent (parsing, routing, validation) runs as it does for real.
#pragma once

#include <filesystem>
#include <memory>

#include "common/temp_dir.hpp"
#include "server/runtime/runtime.hpp"
#include "server/runtime/runtime_registry.hpp"

namespace deskbox::runtime {

// It has none of the optional capabilities (no snapshots, adoption or fast start).
class FakeRuntime : public Runtime {
  public:
    // `network`: what the server makes for each sandbox. none needs nothing (no root);
    // netns makes the server build a real container network (root), as for runc.
    explicit FakeRuntime(NetworkAttach network = NetworkAttach::none) : network_(network) {}
    const char* name() const override { return "fake"; }
    std::unique_ptr<SandboxInstance> start(const SandboxSpec& spec) override;
    std::vector<std::string> list_leftovers(const std::filesystem::path&) override { return {}; }
    void cleanup_leftover(const std::filesystem::path&, const std::string&) override {}
    NetworkAttach network_attach() const override { return network_; }
    // The fake agent runs in-process; the entry is never run.
    std::string agent_channel_arg() const override { return "in-process"; }

  private:
    NetworkAttach network_;
};

// The runtimes of a SandboxManager that has only a FakeRuntime (its name: "fake", which
// ManagerOptions::default_runtime must then be).
RuntimeRegistry fake_runtimes(NetworkAttach network = NetworkAttach::none);

// A template named "fake" for a SandboxManager to create fake sandboxes from: a definition
// (320x200 screen), a "built" rootfs and the images/build.py --print-path that finds it.
// Use images_dir() as ManagerOptions::images_dir; removed with this object.
class FakeTemplate {
  public:
    FakeTemplate();
    std::filesystem::path images_dir() const { return dir_.path() / "images"; }
    std::filesystem::path scratch() const { return dir_.path(); }  // for state dirs and caches

  private:
    TempDir dir_{"deskbox-fake-template"};
};

}  // namespace deskbox::runtime
