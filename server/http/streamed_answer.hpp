// An answer written while it is produced (server-sent events of a stream command, an MCP
// call's progress): the route takes the connection over, sends a 200 header without a length
// (`Connection: close`: the body ends when the connection does) and writes each piece as it
// comes. In-process callers (tests, the fuzzer) have no connection: the pieces are collected
// and finish() answers them as one body.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http/http_message.hpp"

namespace deskbox::server {

class StreamedAnswer {
  public:
    using Headers = std::vector<std::pair<std::string, std::string>>;
    static constexpr std::chrono::seconds kWriteTimeout{30};

    // Sends the header at once when `exchange` has a connection.
    StreamedAnswer(HttpExchange& exchange, std::string_view content_type,
                   const Headers& headers = {});
    ~StreamedAnswer();  // closes the connection it took
    StreamedAnswer(const StreamedAnswer&) = delete;
    StreamedAnswer& operator=(const StreamedAnswer&) = delete;

    // False once the client is gone (a write failed or took longer than kWriteTimeout);
    // writes after that do nothing. Thread-safe: writes go out whole, one at a time.
    bool write(std::string_view text);
    bool client_gone() const;
    // `tell` runs once when the client closes its side (it sends nothing after its request),
    // on an I/O thread: it must only wake someone. Not for in-process callers.
    void on_client_gone(std::function<void()> tell);
    // The answer to return from the handler: nothing when the connection was taken, else the
    // collected body as a 200.
    HttpResponse finish();

  private:
    struct Impl;
    std::shared_ptr<Impl> impl_;  // shared with the read that watches for the client leaving
};

}  // namespace deskbox::server
