// The pulling side of a template between nodes (server/cluster/template_pull.cpp) against a
// fake node on loopback that answers GET /v1/cluster/templates/{image_id} as told: the whole
// image stream, one changed byte, half of it, or a refusal. Only a whole stream is installed;
// every failure names the node and leaves the store as it was; pulls of one template that
// overlap make one request.
#include "server/cluster/template_pull.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/temp_dir.hpp"
#include "server/cluster/node_forwarder.hpp"
#include "server/templates/template_transfer.hpp"
#include "tests/support/eventually.hpp"

namespace deskbox::cluster {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

const std::string kImage = std::string(64, 'c');
const std::string kSecret = "pull-test-secret-0123456789";
const templates::TemplateRef kRef{"app", "v1"};

// A node that serves one answer per connection, the way it is set (and, when held, only once
// released). Counts the requests and remembers the last one's target and secret.
class FakeNode {
  public:
    enum class Mode { whole, changed, cut, refuse };

    explicit FakeNode(std::string stream) : stream_(std::move(stream)) {
        acceptor_.open(tcp::v4());
        acceptor_.bind({net::ip::make_address("127.0.0.1"), 0});
        acceptor_.listen();
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeNode() {
        {
            std::lock_guard lock(mutex_);
            held_ = false;
            stopping_ = true;
        }
        changed_.notify_all();
        beast::error_code ignored;
        // A connection of our own wakes the accept.
        tcp::socket wake(io_);
        wake.connect(acceptor_.local_endpoint(), ignored);
        thread_.join();
    }
    std::string url() const {
        return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
    }
    void set(Mode mode) { mode_ = mode; }
    void hold() {
        std::lock_guard lock(mutex_);
        held_ = true;
    }
    void release() {
        {
            std::lock_guard lock(mutex_);
            held_ = false;
        }
        changed_.notify_all();
    }
    // Waits until `n` requests arrived (bounded).
    bool wait_requests(int n) {
        std::unique_lock lock(mutex_);
        return changed_.wait_for(lock, 20s, [&] { return requests_ >= n; });
    }
    int requests() {
        std::lock_guard lock(mutex_);
        return requests_;
    }
    std::pair<std::string, std::string> last_target_and_secret() {
        std::lock_guard lock(mutex_);
        return {last_target_, last_secret_};
    }

  private:
    void serve() {
        while (true) {
            tcp::socket socket(io_);
            beast::error_code ec;
            acceptor_.accept(socket, ec);
            {
                std::lock_guard lock(mutex_);
                if (stopping_) return;
            }
            if (!ec) answer(socket);
        }
    }
    void answer(tcp::socket& socket) {
        beast::flat_buffer buffer;
        http::request<http::string_body> request;
        beast::error_code ec;
        http::read(socket, buffer, request, ec);
        if (ec) return;
        {
            std::unique_lock lock(mutex_);
            ++requests_;
            last_target_ = std::string(request.target());
            last_secret_ = std::string(request[kClusterSecretHeader]);
            changed_.notify_all();
            changed_.wait(lock, [&] { return !held_ || stopping_; });
        }
        if (mode_ == Mode::refuse) {
            http::response<http::string_body> res{http::status::not_found, 11};
            res.set(http::field::content_type, "application/json");
            res.body() = R"({"error":{"code":"not_found","message":"no such image here"}})";
            res.prepare_payload();
            http::write(socket, res, ec);
            return;
        }
        std::string body = stream_;
        if (mode_ == Mode::changed) body[body.size() / 2] ^= 0x20;
        if (mode_ == Mode::cut) body.resize(body.size() / 2);
        const std::string head =
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.deskbox.image\r\n"
            "Connection: close\r\n\r\n";
        net::write(socket, net::buffer(head + body), ec);
        socket.shutdown(tcp::socket::shutdown_send, ec);
    }

    std::string stream_;
    net::io_context io_;
    tcp::acceptor acceptor_{io_};
    std::thread thread_;
    std::atomic<Mode> mode_{Mode::whole};
    std::mutex mutex_;
    std::condition_variable changed_;
    int requests_ = 0;
    bool held_ = false, stopping_ = false;
    std::string last_target_, last_secret_;
};

class TemplatePull : public ::testing::Test {
  protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "unpacking with owners needs root";
        const auto rootfs = source_.path() / "rootfs";
        std::filesystem::create_directories(rootfs / "etc");
        std::ofstream(rootfs / "etc" / "greeting") << std::string(300000, 'g');
        templates::StoredTemplate record;
        record.ref = kRef;
        record.image_id = kImage;
        record.definition = {{"env", {{"GREETING", "hi"}}}};
        templates::write_image_stream(record, rootfs,
                                      [&](std::string_view b) { stream_.append(b); });
        node_ = std::make_unique<FakeNode>(stream_);
    }
    templates::StoredTemplate pull() {
        return puller_.pull(store_, kRef, kImage, {"node-x", node_->url()});
    }
    // A failed pull names the node and why, and leaves nothing in the store.
    void expect_failure(const std::string& why) {
        try {
            pull();
            ADD_FAILURE() << "installed";
        } catch (const PullFailed& e) {
            EXPECT_EQ(e.node(), "node-x");
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        }
        EXPECT_FALSE(store_.find(kRef));
        for (const auto& e : std::filesystem::directory_iterator(store_dir_.path() / "images"))
            ADD_FAILURE() << "left behind: " << e.path();
    }

    TempDir source_{"pull-source"}, store_dir_{"pull-store"};
    templates::TemplateStore store_{store_dir_.path()};
    TemplatePuller puller_{kSecret, 2000ms};
    std::string stream_;
    std::unique_ptr<FakeNode> node_;
};

}  // namespace

TEST_F(TemplatePull, OnlyAWholeUnchangedStreamIsInstalled) {
    node_->set(FakeNode::Mode::changed);
    expect_failure("SHA-256");
    node_->set(FakeNode::Mode::cut);
    expect_failure("cut short");
    node_->set(FakeNode::Mode::refuse);
    expect_failure("answered 404: no such image here");
    EXPECT_EQ(puller_.figures().failed, 3u);

    node_->set(FakeNode::Mode::whole);
    const auto installed = pull();
    EXPECT_EQ(installed.image_id, kImage);
    EXPECT_EQ(installed.definition["env"]["GREETING"], "hi");
    const auto [target, secret] = node_->last_target_and_secret();
    EXPECT_EQ(target, "/v1/cluster/templates/" + kImage + "?ref=app%3Av1");
    EXPECT_EQ(secret, kSecret) << "the cluster secret authenticates the pull";
    std::ifstream in(store_.rootfs_of(kImage) / "etc" / "greeting");
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), std::string(300000, 'g'));
    EXPECT_EQ(puller_.figures().pulled, 1u);
    EXPECT_EQ(puller_.figures().last_bytes, stream_.size());
}

TEST_F(TemplatePull, UnreachableNodeIsAFailureNamingIt) {
    const std::string url = node_->url();
    node_.reset();  // nothing listens there now
    try {
        puller_.pull(store_, kRef, kImage, {"node-gone", url});
        ADD_FAILURE() << "installed";
    } catch (const PullFailed& e) {
        EXPECT_EQ(e.node(), "node-gone");
        EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(store_.find(kRef));
}

TEST_F(TemplatePull, OverlappingPullsOfOneTemplateMakeOneRequest) {
    node_->hold();  // the answer waits until both pulls are under way
    templates::StoredTemplate first, second;
    std::thread a([&] { first = pull(); });
    ASSERT_TRUE(node_->wait_requests(1));
    std::thread b([&] { second = pull(); });
    // The second joins the first instead of asking the node again.
    EXPECT_TRUE(test::eventually([&] { return puller_.figures().joined == 1; }));
    node_->release();
    a.join();
    b.join();
    EXPECT_EQ(node_->requests(), 1);
    EXPECT_EQ(first.image_id, kImage);
    EXPECT_EQ(second.image_id, kImage);
    EXPECT_EQ(puller_.figures().pulled, 1u);
}

}  // namespace deskbox::cluster
