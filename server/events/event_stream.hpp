// GET /v1/events: the event log as server-sent events on a connection the route took over.
// Each event is "id: N / event: TYPE / data: JSON"; a client resumes after the last id it saw
// (Last-Event-ID or ?after=). Events are written one batch at a time on the connection's
// executor, taken from the log's memory; a client far behind gets older ones read from the file
// on the events' reader thread (never on an I/O thread). A write that stalls 30 s, or the
// client closing, ends the stream; an idle one gets a comment every 15 s so proxies keep it.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <set>
#include <string>

#include "server/events/event_log.hpp"

namespace deskbox::server::events {

struct StreamFilter {
    std::set<std::string> types;  // empty: every type
    std::string sandbox_id;       // empty: every sandbox's
    bool matches(const Event& event) const;
};

// One event as SSE text ("id: 7\nevent: created\ndata: {...}\n\n").
std::string sse_text(const Event& event);

// Starts streaming on `socket` (the 200 header first): the events after `after`, then each new
// one, until the client goes or the socket's executor stops.
void start_event_stream(boost::asio::ip::tcp::socket socket, EventLog& log, StreamFilter filter,
                        std::uint64_t after);

}  // namespace deskbox::server::events
