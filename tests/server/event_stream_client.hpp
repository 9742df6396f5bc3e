// A raw server-sent events client for deskboxd's GET /v1/events: one GET on its own
// connection, events read as they come (each checked to carry its id in the `id:` line).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"

namespace deskbox::test {

class EventStreamClient {
  public:
    EventStreamClient(int port, const std::string& target, const std::string& headers = {}) {
        fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in at{};
        at.sin_family = AF_INET;
        at.sin_port = htons(static_cast<std::uint16_t>(port));
        at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0)
            throw std::runtime_error("cannot connect");
        const std::string request =
            "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + "\r\n";
        if (::send(fd_.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(request.size()))
            throw std::runtime_error("cannot send");
    }
    // The response header (read once the first bytes are in).
    std::string header() {
        fill_until("\r\n\r\n");
        const auto end = buffer_.find("\r\n\r\n");
        if (end == std::string::npos) return buffer_;
        std::string head = buffer_.substr(0, end);
        buffer_.erase(0, end + 4);
        return head;
    }
    // The next event's data as JSON, or null if none came within `timeout`.
    nlohmann::json next(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        while (true) {
            if (!fill_until("\n\n", timeout)) return nlohmann::json();
            const auto end = buffer_.find("\n\n");
            const std::string block = buffer_.substr(0, end);
            buffer_.erase(0, end + 2);
            const auto data = block.find("data: ");
            if (data == std::string::npos) continue;  // retry:, keep-alive comments
            const nlohmann::json event =
                nlohmann::json::parse(block.substr(data + 6, block.find('\n', data) - data - 6));
            EXPECT_NE(block.find("id: " + event["id"].get<std::string>() + "\n"), std::string::npos)
                << block;
            return event;
        }
    }

  private:
    bool fill_until(const std::string& mark,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (buffer_.find(mark) == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return false;
            pollfd p{fd_.get(), POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
            char chunk[4096];
            const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
            if (n <= 0) return false;
            buffer_.append(chunk, static_cast<std::size_t>(n));
        }
        return true;
    }
    UniqueFd fd_;
    std::string buffer_;
};

}  // namespace deskbox::test
