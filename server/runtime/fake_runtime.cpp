#include "server/runtime/fake_runtime.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "protocol/agent_methods.hpp"
#include "protocol/rpc.hpp"

namespace deskbox::runtime {

namespace {

// The agent end of one connection: handshake, then an RpcServer until the host hangs up.
class FakeAgent {
  public:
    FakeAgent(UniqueFd fd, int width, int height)
        : wake_(::dup(fd.get())), thread_([this, fd = std::move(fd), width, height]() mutable {
              int raw = fd.release();
              auto channel = std::make_unique<protocol::Channel>(raw, raw);
              try {
                  protocol::handshake(
                      *channel, "agent",
                      {{"screen", {{"width", width}, {"height", height}}}, {"agent", "fake"}});
              } catch (const std::exception&) {
                  return;  // the host went away first
              }
              std::lock_guard lock(mutex_);
              if (stopped_) return;
              server_ = std::make_unique<protocol::RpcServer>(std::move(channel));
              // The mirror already holds the blank frame of seq 0 a fake screen shows.
              server_->handle(
                  std::string(protocol::method_name(protocol::AgentMethod::screen_sync)),
                  [](const protocol::Request&) {
                      return protocol::Reply{{{"seq", 0}}, {}};
                  });
              server_->start();
          }) {}
    ~FakeAgent() {
        {
            std::lock_guard lock(mutex_);
            stopped_ = true;
            if (server_) server_->close();
        }
        // Ends a handshake still waiting for the host's hello (the dup shares the socket).
        if (wake_) ::shutdown(wake_.get(), SHUT_RDWR);
        if (thread_.joinable()) thread_.join();
        server_.reset();  // waits for its handlers
    }
    FakeAgent(const FakeAgent&) = delete;
    FakeAgent& operator=(const FakeAgent&) = delete;

  private:
    std::mutex mutex_;
    bool stopped_ = false;
    std::unique_ptr<protocol::RpcServer> server_;
    UniqueFd wake_;
    std::thread thread_;  // last: it uses the members above
};

class FakeSandbox : public SandboxInstance {
  public:
    explicit FakeSandbox(const SandboxSpec& spec)
        : id_(spec.id), width_(spec.width), height_(spec.height) {}
    ~FakeSandbox() override { do_kill({}); }

    const std::string& id() const override { return id_; }
    std::filesystem::path agent_socket_path() const override { return {}; }
    UniqueFd connect_agent(std::chrono::milliseconds) override {
        std::lock_guard lock(mutex_);
        if (state_ == SandboxState::exited) throw RuntimeError("sandbox " + id_ + " has ended");
        int fds[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
            throw RuntimeError("socketpair failed");
        UniqueFd host(fds[0]);
        agent_.reset();  // a new connection replaces the old one, as a real agent's does
        agent_ = std::make_unique<FakeAgent>(UniqueFd(fds[1]), width_, height_);
        return host;
    }
    void pause() override { set(SandboxState::paused); }
    void resume() override { set(SandboxState::running); }
    bool alive() override { return state() != SandboxState::exited; }
    SandboxState state() override {
        std::lock_guard lock(mutex_);
        return state_;
    }
    std::optional<ExitInfo> exit_info() override {
        std::lock_guard lock(mutex_);
        if (state_ != SandboxState::exited) return std::nullopt;
        return ExitInfo{137, 9, true, "killed"};
    }
    std::string log_tail(std::size_t) override { return {}; }

  protected:
    void do_kill(const KillOptions&) override {
        std::unique_ptr<FakeAgent> agent;
        {
            std::lock_guard lock(mutex_);
            state_ = SandboxState::exited;
            agent = std::move(agent_);
        }
        agent.reset();  // outside the lock: the host's close callback may ask alive()
    }

  private:
    void set(SandboxState state) {
        std::lock_guard lock(mutex_);
        if (state_ != SandboxState::exited) state_ = state;
    }
    std::string id_;
    int width_, height_;
    std::mutex mutex_;
    SandboxState state_ = SandboxState::running;
    std::unique_ptr<FakeAgent> agent_;
};

}  // namespace

FakeTemplate::FakeTemplate() {
    auto definition = images_dir() / "templates" / "fake";
    std::filesystem::create_directories(definition);
    std::filesystem::create_directories(dir_.path() / "rootfs" / "usr");
    std::ofstream(definition / "template.json") << R"({"session":{"resolution":[320,200]}})";
    std::ofstream(images_dir() / "build.py")
        << "print(" << nlohmann::json((dir_.path() / "rootfs").string()).dump() << ")\n";
}

std::unique_ptr<SandboxInstance> FakeRuntime::start(const SandboxSpec& spec) {
    validate_id(spec.id);
    return std::make_unique<FakeSandbox>(spec);
}

RuntimeRegistry fake_runtimes(NetworkAttach network) {
    RuntimeRegistry runtimes;
    runtimes.add(std::make_unique<FakeRuntime>(network));
    return runtimes;
}

}  // namespace deskbox::runtime
