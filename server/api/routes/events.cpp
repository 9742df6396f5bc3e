#include "server/api/routes/events.hpp"

#include "server/api/http_util.hpp"
#include "server/events/event_service.hpp"
#include "server/events/event_stream.hpp"
#include "server/http/http_server.hpp"  // the stream takes the connection over
#include "server/http/query.hpp"
#include "server/sandbox/sandbox_config.hpp"

namespace deskbox::server::routes {

namespace {

// Where a stream resumes: after event `text` of this node's log. A bare number is this node's
// (the form ids had before they named their node). Each node keeps and streams only its own
// events, so another node's id is refused naming it rather than read as a number of this log.
std::uint64_t event_id(const std::string& text, const std::string& field,
                       const events::EventLog& log) {
    const auto id = events::parse_event_id(text);
    if (!id)
        throw bad_request(
            field, "expected an event id (\"<node>:<number>\" or a number), got '" + text + "'");
    if (!id->node.empty() && id->node != log.node())
        throw bad_request(
            field, "event " + text + " is node " + id->node + "'s; " +
                       (log.node().empty() ? std::string("this server") : "node " + log.node()) +
                       " streams only its own events: ask node " + id->node);
    return id->sequence;
}

// `sandbox_id` empty: every sandbox's events (an API key); else that one's (its ?token= too).
HttpResponse stream(RouteContext& context, const std::string& sandbox_id) {
    if (sandbox_id.empty())
        allow_only(context.query, {"after", "types"});
    else
        allow_only(context.query, {"after", "types", "token"});
    auto* service = context.api.options.events;
    if (!service) throw ApiError(503, "events_unavailable", "this server keeps no events");
    events::StreamFilter filter;
    filter.sandbox_id = sandbox_id;
    if (auto it = context.query.find("types"); it != context.query.end()) {
        try {
            filter.types = events::parse_event_types(it->second);
        } catch (const std::invalid_argument& e) {
            throw bad_request("types", e.what());
        }
    }
    // Without either: the events from now on. A browser's EventSource sends Last-Event-ID
    // when it reconnects; ?after= is for clients that cannot set headers.
    auto& log = service->log();
    std::uint64_t after = log.last_id();
    const auto last_seen = context.request().find("Last-Event-ID");
    if (last_seen != context.request().end())
        after = event_id(std::string(last_seen->value()), "Last-Event-ID", log);
    if (auto it = context.query.find("after"); it != context.query.end())
        after = event_id(it->second, "after", log);
    if (!context.exchange.stream) {  // in-process callers (tests): the events so far as the body
        HttpResponse res{http::status::ok, 11};
        res.set(http::field::content_type, "text/event-stream");
        for (const auto& event : log.read_after(after, 10'000))
            if (filter.matches(event)) res.body() += events::sse_text(event);
        res.prepare_payload();
        return res;
    }
    auto socket = context.exchange.stream->release_socket();
    context.exchange.taken = true;
    events::start_event_stream(std::move(socket), log, std::move(filter), after);
    return {};
}

}  // namespace

HttpResponse stream_events(RouteContext& context) {
    return stream(context, {});
}

HttpResponse stream_sandbox_events(RouteContext& context) {
    return stream(context, context.config().id);
}

}  // namespace deskbox::server::routes
