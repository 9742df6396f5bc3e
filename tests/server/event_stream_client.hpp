// A raw server-sent events client for deskboxd's GET /v1/events: one GET on its own
// connection, events read as they come (each checked to carry its id in the `id:` line).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/server/sse_post_client.hpp"

namespace deskbox::test {

class EventStreamClient {
  public:
    EventStreamClient(int port, const std::string& target, const std::string& headers = {})
        : client_(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + "\r\n") {}
    // The response header (read once the first bytes are in).
    std::string header() { return client_.header(); }
    // The next event's data as JSON, or null if none came within `timeout`.
    nlohmann::json next(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        auto block = client_.next_block(timeout);
        if (!block) return nlohmann::json();
        const nlohmann::json event = SseClient::data_of(*block);
        EXPECT_NE(block->find("id: " + event["id"].get<std::string>() + "\n"), std::string::npos)
            << *block;
        return event;
    }

  private:
    SseClient client_;
};

}  // namespace deskbox::test
