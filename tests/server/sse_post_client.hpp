// A raw client for answers that are server-sent events (deskboxd's GET /v1/events, stream
// commands, MCP calls with progress): one request on its own connection, each event read as
// it comes.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"

namespace deskbox::test {

struct SseEvent {
    std::string name;  // `event:`, "message" when absent
    nlohmann::json data;
};

class SseClient {
  public:
    // `request`: the whole HTTP request, sent as it is.
    SseClient(int port, const std::string& request) {
        fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in at{};
        at.sin_family = AF_INET;
        at.sin_port = htons(static_cast<std::uint16_t>(port));
        at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0)
            throw std::runtime_error("cannot connect");
        if (::send(fd_.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(request.size()))
            throw std::runtime_error("cannot send");
    }
    // The response header (status line included).
    std::string header() {
        fill_until("\r\n\r\n");
        const auto end = buffer_.find("\r\n\r\n");
        if (end == std::string::npos) return buffer_;
        std::string head = buffer_.substr(0, end);
        buffer_.erase(0, end + 4);
        return head;
    }
    // The next block with data (comments such as keep-alives skipped), or nothing if none came
    // within `timeout` (or the stream ended).
    std::optional<std::string> next_block(std::chrono::milliseconds timeout) {
        while (true) {
            if (!fill_until("\n\n", timeout)) return std::nullopt;
            const auto end = buffer_.find("\n\n");
            std::string block = buffer_.substr(0, end);
            buffer_.erase(0, end + 2);
            if (block.find("data: ") != std::string::npos) return block;
        }
    }
    static nlohmann::json data_of(const std::string& block) {
        const auto data = block.find("data: ");
        return nlohmann::json::parse(block.substr(data + 6, block.find('\n', data) - data - 6));
    }
    // The next event, or nothing if none came within `timeout` (or the stream ended).
    std::optional<SseEvent> next(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
        auto block = next_block(timeout);
        if (!block) return std::nullopt;
        SseEvent event{"message", data_of(*block)};
        if (block->rfind("event: ", 0) == 0) event.name = block->substr(7, block->find('\n') - 7);
        return event;
    }
    // True once the server has closed the connection (read to the end meanwhile).
    bool ended(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
        return !fill_until("\n\n\n\n<never>", timeout) && closed_;
    }
    const std::string& unread() const { return buffer_; }

  private:
    bool fill_until(const std::string& mark,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (buffer_.find(mark) == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0 || closed_) return false;
            pollfd p{fd_.get(), POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
            char chunk[4096];
            const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
            if (n <= 0) {
                closed_ = true;
                return false;
            }
            buffer_.append(chunk, static_cast<std::size_t>(n));
        }
        return true;
    }
    UniqueFd fd_;
    std::string buffer_;
    bool closed_ = false;
};

// A JSON POST answered with events.
class SsePostClient : public SseClient {
  public:
    SsePostClient(int port, const std::string& target, const std::string& body,
                  const std::string& headers = {})
        : SseClient(port, "POST " + target +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n" + headers + "\r\n" + body) {}
};

}  // namespace deskbox::test
