// An answer written while it is produced (server-sent events of a stream command, an MCP
// call's progress): the route takes the connection over, sends a 200 header without a length
// (`Connection: close`: the body ends when the connection does) and writes each piece as it
// comes. In-process callers (tests, the fuzzer) have no connection: the pieces are collected
// and finish() answers them as one body.
#pragma once

#include <chrono>
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
    // The answer to return from the handler: nothing when the connection was taken, else the
    // collected body as a 200.
    HttpResponse finish();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::server
