#include "server/sandbox/readiness.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <thread>

#include "server/sandbox/agent_client.hpp"
#include "server/sandbox/request_reader.hpp"
#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

// A JSON integer (never a boolean or a float), saturated to long long.
std::optional<long long> integer_of(const json& v) {
    if (v.is_number_unsigned()) {
        auto u = v.get<std::uint64_t>();
        return u > static_cast<std::uint64_t>(LLONG_MAX) ? LLONG_MAX : static_cast<long long>(u);
    }
    if (v.is_number_integer()) return v.get<long long>();
    return std::nullopt;
}

long long integer_in(const json& v, const std::string& field, long long min, long long max) {
    auto n = integer_of(v);
    if (!n || *n < min || *n > max)
        throw invalid_field(
            field, "expected an integer in " + std::to_string(min) + ".." + std::to_string(max));
    return *n;
}

bool blank(const std::string& s) {
    return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

// "60 s", "1.5 s": a timeout in the words of the messages.
std::string seconds_text(milliseconds d) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", static_cast<double>(d.count()) / 1000);
    std::string s = text;
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s + " s";
}

// A boolean in an agent's answer (anything else, or nothing: false).
bool flag(const json& answer, const char* key) {
    auto it = answer.find(key);
    return it != answer.end() && it->is_boolean() && it->get<bool>();
}

// The windows as the messages list them: each one's title, or its class when it has none.
std::string window_names(const std::vector<ReadinessProbe::Window>& windows) {
    json names = json::array();
    for (const auto& w : windows) names.push_back(w.title.empty() ? w.window_class : w.title);
    return names.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string argv_text(const std::vector<std::string>& argv) {
    return json(argv).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The last non-empty line of a command's stderr, shortened.
std::string last_line(const std::string& text) {
    std::string s = text;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    if (auto nl = s.rfind('\n'); nl != std::string::npos) s = s.substr(nl + 1);
    if (s.size() > 200) s = s.substr(0, 200) + "...";
    return s;
}

}  // namespace

bool ReadyCondition::waits() const {
    return wait && (windows.value_or(0) > 0 || !window_title.empty() || port.has_value() ||
                    !command.empty() || settle_named);
}

json ReadyCondition::to_json() const {
    if (!wait) return false;
    json j = {{"timeout_s", timeout.count() / 1000}, {"settle_ms", settle.count()}};
    if (windows) j["windows"] = *windows;
    if (!window_title.empty()) j["window_title"] = window_title;
    if (port) j["port"] = *port;
    if (!command.empty()) j["command"] = command;
    return j;
}

ReadyCondition default_ready_condition(std::size_t autostart_entries) {
    ReadyCondition c;
    c.windows = static_cast<int>(std::min<std::size_t>(autostart_entries, kMaxReadyWindows));
    c.windows_from_autostart = true;
    return c;
}

ReadyCondition parse_ready_condition(const json& ready, const std::string& field,
                                     std::size_t autostart_entries) {
    if (!ready.is_object()) throw invalid_field(field, "expected an object");
    RequestReader reader(ready, field);
    ReadyCondition c;
    if (const json* windows = reader.raw("windows")) {
        if (windows->is_string() && *windows == "autostart") {
            c = default_ready_condition(autostart_entries);
        } else if (integer_of(*windows)) {
            c.windows =
                static_cast<int>(integer_in(*windows, reader.path("windows"), 0, kMaxReadyWindows));
        } else {
            throw invalid_field(
                reader.path("windows"),
                "expected \"autostart\" or an integer in 0.." + std::to_string(kMaxReadyWindows));
        }
    }
    if (auto title = reader.string("window_title")) {
        if (blank(*title))
            throw invalid_field(reader.path("window_title"), "expected a non-empty string");
        c.window_title = *title;
    }
    if (auto port = reader.integer("port", 1, 65535)) c.port = static_cast<int>(*port);
    if (auto argv = reader.string_list("command", 256)) {
        if (argv->empty())
            throw invalid_field(reader.path("command"),
                                "expected a non-empty array of strings (argv)");
        if (argv->front().empty())
            throw invalid_field(reader.path("command") + "[0]", "program must not be empty");
        c.command = std::move(*argv);
    }
    if (auto timeout = reader.integer("timeout_s", 1, kMaxReadyTimeoutS))
        c.timeout = std::chrono::seconds(*timeout);
    if (auto settle = reader.integer("settle_ms", 0, kMaxReadySettleMs)) {
        c.settle = milliseconds(*settle);
        c.settle_named = true;
    }
    reader.finish();
    return c;
}

namespace {

// What the windows lack of `c` (a count, a title), appended to `unmet`.
void check_windows(const ReadyCondition& c, ReadinessProbe& probe, const std::string& after,
                   std::vector<std::string>& unmet) {
    try {
        const auto windows = probe.mapped_windows();
        if (c.windows && windows.size() < static_cast<std::size_t>(*c.windows)) {
            const int n = *c.windows;
            unmet.push_back(std::to_string(n) + (c.windows_from_autostart ? " autostart" : "") +
                            (n == 1 ? " window" : " windows") + " expected, " +
                            std::to_string(windows.size()) + " mapped" + after + ": " +
                            window_names(windows));
        }
        if (!c.window_title.empty() &&
            std::none_of(windows.begin(), windows.end(), [&](const auto& w) {
                return w.title.find(c.window_title) != std::string::npos;
            }))
            unmet.push_back(
                "no mapped window's title contains " +
                json(c.window_title).dump(-1, ' ', false, json::error_handler_t::replace) + after +
                ": " + window_names(windows));
    } catch (const ProbeError& e) {
        unmet.push_back("the windows could not be listed" + after + ": " + e.what());
    }
}

void check_port(int port, ReadinessProbe& probe, const std::string& after,
                std::vector<std::string>& unmet) {
    try {
        const auto ports = probe.listening_ports();
        if (std::find(ports.begin(), ports.end(), port) == ports.end())
            unmet.push_back("nothing listens on TCP port " + std::to_string(port) + after);
    } catch (const ProbeError& e) {
        unmet.push_back("the listening ports could not be read" + after + ": " + e.what());
    }
}

// One run of the ready command, bounded by `limit`.
void check_command(const std::vector<std::string>& command, milliseconds limit,
                   ReadinessProbe& probe, const std::string& after,
                   std::vector<std::string>& unmet) {
    try {
        const auto r = probe.run(command, limit);
        if (r.timed_out) {
            unmet.push_back("command " + argv_text(command) + " still runs past " +
                            seconds_text(limit) + after);
        } else if (r.exit_code != 0) {
            const std::string err = last_line(r.stderr_text);
            unmet.push_back("command " + argv_text(command) + " still exits " +
                            std::to_string(r.exit_code) + after +
                            (err.empty() ? "" : " (stderr: " + err + ")"));
        }
    } catch (const ProbeError& e) {
        unmet.push_back("command " + argv_text(command) + " could not run" + after + ": " +
                        e.what());
    }
}

}  // namespace

ReadyOutcome wait_until_ready(const ReadyCondition& c, ReadinessProbe& probe) {
    ReadyOutcome out;
    if (!c.waits()) {
        out.ready = true;
        return out;
    }
    const auto start = probe.now();
    const auto deadline = start + c.timeout;
    const milliseconds interval = c.command.empty() ? milliseconds(100) : milliseconds(200);
    const bool look_at_windows = c.windows.value_or(0) > 0 || !c.window_title.empty();
    const std::string after = " after " + seconds_text(c.timeout);
    auto left = [&] {
        return std::max(milliseconds(0),
                        std::chrono::duration_cast<milliseconds>(deadline - probe.now()));
    };
    auto finish = [&](std::vector<std::string> unmet) {
        out.waited = std::chrono::duration_cast<milliseconds>(probe.now() - start);
        out.ready = unmet.empty();
        for (const auto& u : unmet) out.unmet += (out.unmet.empty() ? "" : "; ") + u;
        return out;
    };

    // Rounds until every named condition holds in the same round.
    while (true) {
        const auto round = probe.now();
        std::vector<std::string> unmet;
        if (look_at_windows) check_windows(c, probe, after, unmet);
        if (c.port) check_port(*c.port, probe, after, unmet);
        // Each run of the command may take what is left, at least a second and at most 30 s.
        if (!c.command.empty())
            check_command(c.command, std::clamp(left(), milliseconds(1000), milliseconds(30'000)),
                          probe, after, unmet);
        if (unmet.empty()) break;
        if (probe.now() >= deadline) return finish(std::move(unmet));
        probe.sleep_until(std::min<ReadinessProbe::Clock::time_point>(round + interval, deadline));
    }

    // Then the screen settles: the windows have drawn. One settle period is allowed even when
    // the conditions held just before the deadline.
    if (c.settle.count() > 0) {
        bool settled = false;
        std::string why;
        try {
            settled = probe.settle(c.settle, std::max(left(), c.settle));
        } catch (const ProbeError& e) {
            why = std::string(": ") + e.what();
        }
        if (!settled)
            return finish({"the screen did not stay still for " + std::to_string(c.settle.count()) +
                           " ms within " + seconds_text(c.timeout) + why});
    }
    return finish({});
}

void AgentReadinessProbe::sleep_until(Clock::time_point when) {
    std::this_thread::sleep_until(when);
}

template <typename Ask>
auto AgentReadinessProbe::asked(Ask ask) {
    try {
        return ask();
    } catch (const SandboxError& e) {
        if (e.fault() == SandboxFault::unavailable || (running_ && !running_())) throw;
        throw ProbeError(e.what());
    }
}

std::vector<ReadinessProbe::Window> AgentReadinessProbe::mapped_windows() {
    // The guest answers: read it as untrusted.
    const json r = asked([this] { return agent_.windows(); });
    if (!r.is_object() || !r.contains("windows") || !r["windows"].is_array())
        throw ProbeError("windows.list answered without a windows list");
    std::vector<Window> out;
    for (const auto& w : r["windows"]) {
        if (!w.is_object()) continue;
        auto visible = w.find("visible");
        if (visible != w.end() && *visible != true) continue;
        auto text = [&](const char* key) {
            auto it = w.find(key);
            return it != w.end() && it->is_string() ? it->get<std::string>() : std::string();
        };
        out.push_back({text("title"), text("class")});
    }
    return out;
}

std::vector<int> AgentReadinessProbe::listening_ports() {
    const json r = asked([this] { return agent_.listening_ports(); });
    if (!r.is_object() || !r.contains("ports") || !r["ports"].is_array())
        throw ProbeError("net.listening answered without a ports list");
    std::vector<int> out;
    for (const auto& p : r["ports"])
        if (p.is_object() && p.contains("port") && p["port"].is_number_integer())
            out.push_back(p["port"].get<int>());
    return out;
}

ReadinessProbe::CommandResult AgentReadinessProbe::run(const std::vector<std::string>& argv,
                                                       milliseconds limit) {
    CommandRequest command;
    command.argv = argv;
    command.timeout_s = static_cast<double>(limit.count()) / 1000.0;
    const auto r = asked([&] { return agent_.run_command(std::move(command), Caller::server); });
    if (!r.exit_code) throw ProbeError("exec.run answered without an exit code");
    CommandResult result;
    result.exit_code = *r.exit_code;
    result.timed_out = flag(r.json, "timed_out");
    result.stderr_text = r.stderr_text;
    return result;
}

bool AgentReadinessProbe::settle(milliseconds quiet, milliseconds limit) {
    // screen.sync waits (at most max_ms, the agent's cap 30 s) until neither damage nor input
    // happened for settle_ms: the settle a screenshot asks for, only longer.
    const auto end = Clock::now() + limit;
    while (true) {
        const auto chunk = std::clamp(std::chrono::duration_cast<milliseconds>(end - Clock::now()),
                                      milliseconds(0), milliseconds(30'000));
        const auto synced = asked([&] {
            return agent_.sync_screen(static_cast<int>(quiet.count()),
                                      static_cast<int>(chunk.count()));
        });
        if (synced.settled) return true;
        if (Clock::now() >= end) return false;
    }
}

}  // namespace deskbox::server
