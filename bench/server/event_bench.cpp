// Lifecycle event delivery latency, on this host: a real deskboxd with real container sandboxes,
// a webhook receiver on loopback (tests/support/webhook_receiver.hpp). For N create/kill cycles,
// each event's delay from its lifecycle moment (the event's `time`, stamped when the sandbox's
// audit line is written) to the receiver reading the POST: p50/p99 per type and overall. Next to
// it, the same events through GET /v1/events (the SSE stream) as the alternative a dashboard
// would use instead of a webhook.
//
//   event_bench [--cycles N]   (N ≤ 200; default 20)
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/bench_deskboxd.hpp"
#include "bench/support/percentiles.hpp"
#include "common/unique_fd.hpp"
#include "server/client/api_client.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/webhook_receiver.hpp"

namespace {

using namespace deskbox;
using nlohmann::json;
using Clock = std::chrono::system_clock;

// "2026-12-07T02:31:00.123Z" as a time point.
Clock::time_point parse_time(const std::string& text) {
    std::tm tm{};
    strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    const int ms = std::atoi(text.substr(20, 3).c_str());
    return Clock::from_time_t(timegm(&tm)) + std::chrono::milliseconds(ms);
}

double ms_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

// Reads GET /v1/events and stamps each event's arrival, until stopped.
class StreamReader {
  public:
    explicit StreamReader(int port) {
        fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in at{};
        at.sin_family = AF_INET;
        at.sin_port = htons(static_cast<std::uint16_t>(port));
        at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) std::exit(1);
        const std::string request = "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        if (::send(fd_.get(), request.data(), request.size(), MSG_NOSIGNAL) < 0) std::exit(1);
        thread_ = std::thread([this] { read(); });
    }
    ~StreamReader() {
        stop_ = true;
        thread_.join();
    }
    std::vector<double> delays() const { return delays_; }

  private:
    void read() {
        std::string buffer;
        while (!stop_) {
            pollfd p{fd_.get(), POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            char chunk[8192];
            const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
            if (n <= 0) return;
            const auto now = Clock::now();
            buffer.append(chunk, static_cast<std::size_t>(n));
            std::size_t data;
            while ((data = buffer.find("data: ")) != std::string::npos) {
                const auto end = buffer.find("\n\n", data);
                if (end == std::string::npos) break;
                const json event = json::parse(buffer.substr(data + 6, end - data - 6));
                delays_.push_back(ms_between(parse_time(event["time"]), now));
                buffer.erase(0, end + 2);
            }
        }
    }
    UniqueFd fd_;
    std::vector<double> delays_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

void print(const char* what, const std::vector<double>& samples) {
    const auto p = bench::percentiles(samples);
    std::printf("  %-28s n=%-4zu p50 %7.2f ms   p99 %7.2f ms\n", what, samples.size(), p.p50,
                p.p99);
}

}  // namespace

int main(int argc, char** argv) {
    int cycles = 20;
    if (argc == 3 && std::string(argv[1]) == "--cycles") cycles = std::atoi(argv[2]);
    if (cycles < 1 || cycles > 200) {
        std::fprintf(stderr, "usage: event_bench [--cycles N]  (1..200)\n");
        return 2;
    }
    test::WebhookReceiver receiver;
    TempDir dir("event-bench");
    const auto config = dir.path() / "deskboxd.json";
    std::ofstream(config)
        << json{{"webhooks", {{{"url", receiver.url()}, {"secret", "bench-secret"}}}}}.dump();
    bench::Daemon daemon({"--config", config.string()});
    client::ClientOptions options;
    options.server = daemon.url();
    client::ApiClient api(options);
    StreamReader stream(daemon.port());
    for (int i = 0; i < cycles; ++i) {
        const std::string id =
            api.post_json("/v1/sandboxes", {{"network", false}, {"ready", false}}).at("id");
        api.delete_json("/v1/sandboxes/" + id);
    }
    const std::size_t expected = static_cast<std::size_t>(cycles) * 3;  // created, ready, killed
    if (!test::eventually([&] { return receiver.accepted().size() >= expected; },
                          std::chrono::seconds(60))) {
        std::fprintf(stderr, "only %zu of %zu events arrived\n", receiver.accepted().size(),
                     expected);
        return 1;
    }
    std::map<std::string, std::vector<double>> by_type;
    std::vector<double> all;
    for (const auto& r : receiver.accepted()) {
        const json event = json::parse(r.body);
        const double ms = ms_between(parse_time(event["time"]), r.at);
        by_type[event["type"]].push_back(ms);
        all.push_back(ms);
    }
    std::printf("event delivery, %d create/kill cycles of container sandboxes (loopback)\n",
                cycles);
    std::printf(" webhook (signed POST, one connection per event):\n");
    for (const auto& [type, samples] : by_type) print(type.c_str(), samples);
    print("all", all);
    test::eventually([&] { return stream.delays().size() >= expected; }, std::chrono::seconds(10));
    std::printf(" GET /v1/events (SSE on one connection):\n");
    print("all", stream.delays());
    std::printf(" (event times have millisecond resolution)\n");
    return 0;
}
