#include "server/api/routes/metrics.hpp"

#include <malloc.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/io_loop.hpp"
#include "server/cluster/cluster_service.hpp"
#include "server/events/event_service.hpp"
#include "server/events/webhook_sender.hpp"
#include "server/http/http_server.hpp"
#include "server/network/port_proxy.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/stream/viewer_session.hpp"
#include "server/usage/usage_sampler.hpp"

namespace deskbox::server::routes {

namespace {

// A label value as Prometheus' text format wants it: backslash, quote and newline escaped.
std::string prometheus_label_value(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

std::string egress_metrics(const SandboxManager& manager) {
    // Per sandbox: connections by decision and destination (the busiest 20 names, so a sandbox
    // cannot blow up the label set), bytes each way, DNS answers.
    std::string connections =
        "# HELP deskbox_egress_connections_total Sandbox egress connections by decision (allowed, "
        "blocked, cut: allowed then cut) and destination (busiest 20 per sandbox).\n# TYPE "
        "deskbox_egress_connections_total counter\n";
    std::string bytes =
        "# HELP deskbox_egress_bytes_total Bytes a sandbox sent out and got back.\n"
        "# TYPE deskbox_egress_bytes_total counter\n";
    std::string dns =
        "# HELP deskbox_dns_queries_total Sandbox DNS queries answered and refused.\n"
        "# TYPE deskbox_dns_queries_total counter\n";
    std::string refused =
        "# HELP deskbox_egress_refused_total Sandbox connections deskboxd refused: over_cap (the "
        "sandbox held its share of fds, --egress-max-connections) or no_fds (deskboxd ran out).\n"
        "# TYPE deskbox_egress_refused_total counter\n";
    for (const auto& sandbox : manager.list()) {
        auto net = sandbox->network();
        if (!net || !net->has_interface()) continue;
        const std::string id = "sandbox=\"" + prometheus_label_value(sandbox->id()) + "\"";
        for (const auto& [name, c] : net->top_destinations(20))
            for (auto [decision, n] : {std::pair{"allowed", c.allowed},
                                       std::pair{"blocked", c.blocked}, std::pair{"cut", c.cut}})
                if (n)
                    connections += "deskbox_egress_connections_total{" + id + ",decision=\"" +
                                   decision + "\",destination=\"" + prometheus_label_value(name) +
                                   "\"} " + std::to_string(n) + "\n";
        auto t = net->totals();
        bytes += "deskbox_egress_bytes_total{" + id + ",direction=\"out\"} " +
                 std::to_string(t.bytes_out) + "\n";
        bytes += "deskbox_egress_bytes_total{" + id + ",direction=\"in\"} " +
                 std::to_string(t.bytes_in) + "\n";
        dns += "deskbox_dns_queries_total{" + id + ",decision=\"answered\"} " +
               std::to_string(t.dns_answered) + "\n";
        dns += "deskbox_dns_queries_total{" + id + ",decision=\"refused\"} " +
               std::to_string(t.dns_refused) + "\n";
        refused += "deskbox_egress_refused_total{" + id + ",reason=\"over_cap\"} " +
                   std::to_string(t.refused_over_cap) + "\n";
        refused += "deskbox_egress_refused_total{" + id + ",reason=\"no_fds\"} " +
                   std::to_string(t.refused_no_fds) + "\n";
    }
    return connections + bytes + dns + refused;
}

// One metric family in Prometheus' text format: HELP, TYPE, then its sample lines.
std::string metric_family(const std::string& name, const std::string& help, const char* type,
                          const std::string& samples) {
    return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + samples;
}

// Each webhook's deliveries: sent, failed attempts, and events given up on (the backlog cap).
std::string webhook_metrics(const events::EventService* service) {
    if (!service || service->senders().empty()) return {};
    std::string sent, failed, dropped, behind;
    const std::uint64_t last = service->log().last_id();
    for (const auto& sender : service->senders()) {
        const std::string label = "{url=\"" + prometheus_label_value(sender->url()) + "\"} ";
        sent +=
            "deskbox_webhook_delivered_total" + label + std::to_string(sender->delivered()) + "\n";
        failed += "deskbox_webhook_failed_attempts_total" + label +
                  std::to_string(sender->failed_attempts()) + "\n";
        dropped +=
            "deskbox_webhook_dropped_total" + label + std::to_string(sender->dropped()) + "\n";
        behind += "deskbox_webhook_backlog_events" + label +
                  std::to_string(last - std::min(last, sender->cursor())) + "\n";
    }
    return metric_family("deskbox_webhook_delivered_total", "Events a webhook acknowledged (2xx).",
                         "counter", sent) +
           metric_family("deskbox_webhook_failed_attempts_total",
                         "Webhook POSTs that failed (each retried with backoff).", "counter",
                         failed) +
           metric_family("deskbox_webhook_dropped_total",
                         "Events given up on for a webhook more than --events-max-undelivered "
                         "behind.",
                         "counter", dropped) +
           metric_family("deskbox_webhook_backlog_events",
                         "Events in the log a webhook has not had yet.", "gauge", behind);
}

std::string process_metrics() {
    // What a leak or a fragmenting heap looks like from outside: resident memory, the heap's
    // own view of what is in use and what it holds free, fds and threads.
    std::string out;
    auto gauge = [&](const std::string& name, const char* help, std::uint64_t value) {
        out += metric_family(name, help, "gauge", name + " " + std::to_string(value) + "\n");
    };
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0, resident = 0;
    if (statm >> pages >> resident)
        gauge("deskboxd_resident_bytes", "Resident memory of deskboxd.",
              resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)));
    struct mallinfo2 heap = ::mallinfo2();
    gauge("deskboxd_heap_in_use_bytes", "Heap bytes handed out (malloc's own count).",
          heap.uordblks + heap.hblkhd);
    gauge("deskboxd_heap_free_bytes", "Heap bytes free but kept by malloc.", heap.fordblks);
    std::error_code ec;
    std::uint64_t fds = 0, threads = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++fds;
    for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++threads;
    gauge("deskboxd_open_fds", "Open file descriptors of deskboxd.", fds);
    gauge("deskboxd_threads", "Threads of deskboxd.", threads);
    return out;
}

std::string usage_metrics(const SandboxManager& manager) {
    std::string out;
    auto family = [&](const char* name, const char* help, const std::string& lines) {
        if (!lines.empty()) out += metric_family(name, help, "gauge", lines);
    };
    std::string pids, memory, disk;
    for (const auto& sandbox : manager.list()) {
        auto u = sandbox->usage();
        // Ids are [A-Za-z0-9_.-]: nothing to escape in a label.
        const std::string id = "{sandbox=\"" + sandbox->id() + "\"} ";
        if (u.pids) pids += "deskbox_sandbox_pids" + id + std::to_string(*u.pids) + "\n";
        if (u.memory_bytes)
            memory += "deskbox_sandbox_memory_bytes" + id + std::to_string(*u.memory_bytes) + "\n";
        if (u.disk_bytes)
            disk += "deskbox_sandbox_disk_bytes" + id + std::to_string(*u.disk_bytes) + "\n";
    }
    family("deskbox_sandbox_pids", "Processes and threads of a sandbox (limits.pids).", pids);
    family("deskbox_sandbox_memory_bytes", "Memory a sandbox uses (limits.memory_mb).", memory);
    family("deskbox_sandbox_disk_bytes",
           "What a sandbox wrote to its writable layer (limits.disk_mb).", disk);
    return out;
}

// Running and paused sandboxes of each template, and how long the ended ones lived.
std::string product_metrics(const SandboxManager& manager, const usage::UsageService* usage) {
    std::map<std::pair<std::string, std::string>, std::size_t> by_template;
    for (const auto& sandbox : manager.list()) {
        const auto status = sandbox->status();
        if (status == SandboxStatus::running || status == SandboxStatus::paused)
            ++by_template[{sandbox->config().template_name, to_string(status)}];
    }
    std::string lines;
    for (const auto& [key, n] : by_template)
        lines += "deskbox_template_sandboxes{template=\"" + key.first + "\",state=\"" + key.second +
                 "\"} " + std::to_string(n) + "\n";
    std::string out = metric_family("deskbox_template_sandboxes",
                                    "Running and paused sandboxes by template.", "gauge", lines);
    if (!usage) return out;
    static constexpr std::array<double, 10> kLifetimeBuckets = {10,   30,   60,   300,   900,
                                                                1800, 3600, 7200, 21600, 86400};
    std::array<std::uint64_t, kLifetimeBuckets.size()> counts{};
    double sum = 0;
    const auto lifetimes = usage->ledger().ended_lifetimes();
    for (double seconds : lifetimes) {
        sum += seconds;
        for (std::size_t i = 0; i < kLifetimeBuckets.size(); ++i)
            if (seconds <= kLifetimeBuckets[i]) ++counts[i];
    }
    const std::string name = "deskbox_sandbox_lifetime_seconds";
    lines.clear();
    for (std::size_t i = 0; i < kLifetimeBuckets.size(); ++i)
        lines += name + "_bucket{le=\"" + std::to_string(static_cast<long>(kLifetimeBuckets[i])) +
                 "\"} " + std::to_string(counts[i]) + "\n";
    lines += name + "_bucket{le=\"+Inf\"} " + std::to_string(lifetimes.size()) + "\n";
    lines += name + "_sum " + std::to_string(sum) + "\n";
    lines += name + "_count " + std::to_string(lifetimes.size()) + "\n";
    return out + metric_family(name, "How long ended sandboxes lived (the usage ledger's).",
                               "histogram", lines);
}

}  // namespace

HttpResponse metrics_page(RouteContext& context) {
    const Metrics& metrics = context.api.metrics;
    const ViewerCounters& viewers = context.api.viewers;
    const network::PortProxyCounters& ports = context.api.ports;
    std::string text;
    text += "# HELP deskbox_sandboxes Sandboxes by state.\n# TYPE deskbox_sandboxes gauge\n";
    for (auto& [state, n] : context.api.manager.count_by_state())
        text += "deskbox_sandboxes{state=\"" + state + "\"} " + std::to_string(n) + "\n";
    text += metrics.create_seconds.render("deskbox_create_seconds", "Sandbox create latency.");
    text += metrics.screenshot_seconds.render("deskbox_screenshot_seconds", "Screenshot latency.");
    text += metrics.action_seconds.render("deskbox_action_seconds", "Action request latency.");
    text += metrics.command_seconds.render("deskbox_command_seconds", "Command request latency.");
    text += metrics.render_counters();
    auto counter = [&](const std::string& name, const char* help, const char* type, auto value) {
        text += metric_family(name, help, type, name + " " + std::to_string(value) + "\n");
    };
    counter("deskbox_viewers", "Connected stream and VNC viewers.", "gauge",
            viewers.connected.load());
    counter("deskbox_viewer_input_ignored_total", "Input sent with a view-only token.", "counter",
            viewers.input_ignored.load());
    counter("deskbox_viewer_bad_messages_total", "Malformed viewer messages.", "counter",
            viewers.bad_messages.load());
    counter("deskbox_viewer_packets_dropped_total", "Video packets skipped for slow viewers.",
            "counter", viewers.packets_dropped.load());
    counter("deskbox_port_proxy_connections", "Open exposed-port connections.", "gauge",
            ports.open.load());
    counter("deskbox_port_proxy_requests_total", "Exposed-port requests relayed.", "counter",
            ports.total.load());
    const HttpConnectionCounters& http = http_connection_counters();
    counter("deskbox_http_connections", "Open HTTP connections (--max-http-connections).", "gauge",
            http.open.load());
    counter("deskbox_http_idle_connections",
            "HTTP connections waiting for a request (--max-idle-http-connections).", "gauge",
            http.idle.load());
    counter("deskbox_http_connections_refused_total",
            "HTTP connections closed on accept: the cap was reached with none idle.", "counter",
            http.refused.load());
    counter("deskbox_http_idle_closed_total",
            "Idle HTTP connections closed to make room under the caps.", "counter",
            http.idle_closed.load());
    counter("deskbox_http_accept_errors_total",
            "Failed accepts (out of fds or memory); each waits 50 ms to 1 s before the next.",
            "counter", http.accept_errors.load());
    counter("deskboxd_io_handler_exceptions_total",
            "Exceptions that escaped an I/O handler, caught and logged (a bug to report).",
            "counter", io_loop_exceptions().load());
    text += egress_metrics(context.api.manager);
    text += usage_metrics(context.api.manager);
    text += product_metrics(context.api.manager, context.api.options.usage);
    text += webhook_metrics(context.api.options.events);
    text += process_metrics();
    if (auto* cluster = context.api.options.cluster) text += cluster->metrics();
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, "text/plain; version=0.0.4");
    res.body() = std::move(text);
    return res;
}

}  // namespace deskbox::server::routes
