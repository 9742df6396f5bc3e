#include "server/usage/usage_query.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <set>

#include "common/parse_integer.hpp"
#include "common/utc_time.hpp"
#include "server/http/api_error.hpp"

namespace deskbox::server::usage {

using nlohmann::json;

namespace {

constexpr std::int64_t kMaxStepS = 7 * 24 * 3600;
constexpr std::size_t kMaxMetadataKey = 64;

std::optional<int> digits(std::string_view text, std::size_t at, std::size_t count) {
    if (at + count > text.size()) return std::nullopt;
    auto value = parse_integer(text.substr(at, count));
    if (!value || !std::isdigit(static_cast<unsigned char>(text[at]))) return std::nullopt;
    return static_cast<int>(*value);
}

std::string iso(Millis at) {
    return utc_rfc3339(std::chrono::system_clock::time_point(std::chrono::milliseconds(at)));
}

std::string day_of(Millis at) {
    return iso(at).substr(0, 10);
}

Millis time_param(const QueryParams& query, const std::string& name, Millis fallback) {
    auto it = query.find(name);
    if (it == query.end()) return fallback;
    auto at = parse_time(it->second);
    if (!at)
        throw bad_request(name,
                          "expected an RFC 3339 time (2026-12-07T02:00:00Z) or Unix "
                          "seconds, got '" +
                              it->second + "'");
    return *at;
}

void check_range(Millis from, Millis to) {
    if (to < from) throw bad_request("to", "must not be before from");
}

void allow_only(const QueryParams& query, const std::set<std::string>& allowed) {
    for (const auto& [name, value] : query)
        if (!allowed.count(name)) throw bad_request(name, "unknown query parameter");
}

}  // namespace

std::optional<Millis> parse_time(std::string_view text) {
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos) {
        auto seconds = parse_integer(text);
        if (!seconds || *seconds > 253402300799LL) return std::nullopt;  // past year 9999
        return *seconds * 1000;
    }
    // YYYY-MM-DDTHH:MM:SS
    auto year = digits(text, 0, 4), month = digits(text, 5, 2), day = digits(text, 8, 2);
    auto hour = digits(text, 11, 2), minute = digits(text, 14, 2), second = digits(text, 17, 2);
    if (!year || !month || !day || !hour || !minute || !second || text[4] != '-' ||
        text[7] != '-' || (text[10] != 'T' && text[10] != 't') || text[13] != ':' ||
        text[16] != ':' || *month < 1 || *month > 12 || *day < 1 || *day > 31 || *hour > 23 ||
        *minute > 59 || *second > 60)
        return std::nullopt;
    std::size_t at = 19;
    Millis fraction = 0;
    if (at < text.size() && text[at] == '.') {
        std::size_t end = at + 1;
        while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
        if (end == at + 1) return std::nullopt;
        std::string ms(text.substr(at + 1, std::min<std::size_t>(3, end - at - 1)));
        ms.resize(3, '0');
        fraction = *parse_integer(ms);
        at = end;
    }
    Millis offset_ms = 0;
    if (at + 1 == text.size() && (text[at] == 'Z' || text[at] == 'z')) {
    } else if (at + 6 == text.size() && (text[at] == '+' || text[at] == '-') &&
               text[at + 3] == ':') {
        auto oh = digits(text, at + 1, 2), om = digits(text, at + 4, 2);
        if (!oh || !om || *oh > 23 || *om > 59) return std::nullopt;
        offset_ms = ((*oh * 60LL) + *om) * 60'000 * (text[at] == '+' ? 1 : -1);
    } else {
        return std::nullopt;
    }
    std::tm tm{};
    tm.tm_year = *year - 1900;
    tm.tm_mon = *month - 1;
    tm.tm_mday = *day;
    tm.tm_hour = *hour;
    tm.tm_min = *minute;
    tm.tm_sec = *second;
    const std::time_t seconds = ::timegm(&tm);
    if (tm.tm_mday != *day) return std::nullopt;  // 2026-02-31 rolled over
    return static_cast<Millis>(seconds) * 1000 + fraction - offset_ms;
}

MetricsQuery parse_metrics_query(const QueryParams& query, Millis started, Millis now) {
    allow_only(query, {"from", "to", "step"});
    MetricsQuery q;
    q.from = time_param(query, "from", started);
    q.to = time_param(query, "to", now);
    check_range(q.from, q.to);
    if (auto it = query.find("step"); it != query.end()) {
        auto step = parse_integer(it->second);
        if (!step || *step < 1 || *step > kMaxStepS)
            throw bad_request("step", "expected whole seconds from 1 to " +
                                          std::to_string(kMaxStepS) + ", got '" + it->second + "'");
        q.step_s = *step;
    }
    return q;
}

json metrics_answer(const SandboxHistory& history, const MetricsQuery& q) {
    json samples = json::array();
    const UsageSample* previous = nullptr;  // the last one emitted
    const auto& all = history.samples;
    for (std::size_t i = 0; i < all.size(); ++i) {
        const UsageSample& s = all[i];
        if (s.at < q.from) {
            previous = &s;
            continue;
        }
        if (s.at > q.to) break;
        const Millis step_ms = q.step_s * 1000;
        const bool last_of_step = step_ms == 0 || i + 1 == all.size() || all[i + 1].at > q.to ||
                                  all[i + 1].at / step_ms != s.at / step_ms;
        if (!last_of_step) continue;
        json j = to_json(s);
        j["at"] = iso(s.at);
        j["at_ms"] = s.at;
        if (previous && step_ms > 0) {  // over the whole step, not its last interval
            const double dt = (s.at - previous->at) / 1000.0;
            const auto d = s.totals.since(previous->totals);
            j["cpu_percent"] = dt > 0 ? d.cpu_seconds / dt * 100.0 : 0.0;
            j["net_out_bytes"] = d.egress_bytes;
            j["net_in_bytes"] = d.ingress_bytes;
        }
        samples.push_back(std::move(j));
        previous = &s;
    }
    json answer = {{"id", history.start.id},
                   {"from", iso(q.from)},
                   {"to", iso(q.to)},
                   {"step_s", q.step_s},
                   {"state", history.ended_at ? "ended" : "running"},
                   {"samples", std::move(samples)}};
    if (history.ended_at) answer["ended_at"] = iso(*history.ended_at);
    return answer;
}

UsageQuery parse_usage_query(const QueryParams& query, Millis now) {
    allow_only(query, {"from", "to", "group_by", "format"});
    UsageQuery q;
    q.from = time_param(query, "from", 0);
    q.to = time_param(query, "to", now);
    check_range(q.from, q.to);
    if (auto it = query.find("group_by"); it != query.end()) {
        const std::string& g = it->second;
        if (g == "template") {
            q.group_by = GroupBy::template_name;
        } else if (g == "day") {
            q.group_by = GroupBy::day;
        } else if (g.rfind("metadata.", 0) == 0 && g.size() > 9 &&
                   g.size() - 9 <= kMaxMetadataKey) {
            q.group_by = GroupBy::metadata;
            q.metadata_key = g.substr(9);
        } else {
            throw bad_request("group_by",
                              "expected template, day or metadata.KEY (a key of 1 "
                              "to 64 bytes), got '" +
                                  g + "'");
        }
    }
    if (auto it = query.find("format"); it != query.end()) {
        if (it->second != "json" && it->second != "csv")
            throw bad_request("format", "expected json or csv, got '" + it->second + "'");
        q.csv = it->second == "csv";
    }
    return q;
}

std::vector<UsageGroup> summarise(const std::vector<SandboxHistory>& histories,
                                  const UsageQuery& q) {
    std::map<std::string, UsageGroup> groups;
    auto add = [&](const std::string& key, const SandboxHistory& h, Millis from, Millis to) {
        UsageTotals used = h.totals_at(to).since(h.totals_at(from));
        // The peak of the period: the largest disk any of its samples saw.
        used.disk_peak_bytes = 0;
        for (const auto& s : h.samples)
            if (s.at > from && s.at <= to)
                used.disk_peak_bytes = std::max(used.disk_peak_bytes, s.disk_bytes);
        if (used.lifetime_seconds <= 0 && used.cpu_seconds <= 0) return;
        UsageGroup& g = groups[key];
        g.key = key;
        g.sandboxes += 1;
        g.totals.add(used);
    };
    for (const auto& h : histories) {
        if (q.group_by == GroupBy::day) {
            const Millis first = std::max(q.from, h.start.at);
            const Millis last = std::min(q.to, h.last_at());
            for (Millis day = first / kDayMs * kDayMs; day <= last; day += kDayMs)
                add(day_of(day), h, std::max(q.from, day), std::min(q.to, day + kDayMs));
            continue;
        }
        std::string key = "all";
        if (q.group_by == GroupBy::template_name) key = h.start.template_name;
        if (q.group_by == GroupBy::metadata) {
            auto it = h.start.metadata.find(q.metadata_key);
            key = it == h.start.metadata.end() ? ""
                  : it->is_string()            ? it->get<std::string>()
                                               : it->dump();
        }
        add(key, h, q.from, q.to);
    }
    std::vector<UsageGroup> out;
    for (auto& [key, g] : groups) out.push_back(std::move(g));
    return out;
}

double cost_of(const UsageTotals& t, const Prices& prices) {
    return t.vcpu_seconds * prices.vcpu_second + t.memory_reserved_gib_seconds * prices.gib_second;
}

json usage_json(const std::vector<UsageGroup>& groups, const UsageQuery& q, const Prices& prices) {
    static const char* const kGroupNames[] = {"none", "template", "metadata", "day"};
    json rows = json::array();
    UsageTotals all;
    std::size_t sandboxes = 0;
    for (const auto& g : groups) {
        json row = to_json(g.totals);
        row["key"] = g.key;
        row["sandboxes"] = g.sandboxes;
        if (prices.any()) row["cost"] = cost_of(g.totals, prices);
        rows.push_back(std::move(row));
        all.add(g.totals);
        sandboxes += g.sandboxes;
    }
    json total = to_json(all);
    total["sandboxes"] = sandboxes;
    if (prices.any()) total["cost"] = cost_of(all, prices);
    std::string group_by = kGroupNames[static_cast<int>(q.group_by)];
    if (q.group_by == GroupBy::metadata) group_by = "metadata." + q.metadata_key;
    return {{"from", iso(q.from)},
            {"to", iso(q.to)},
            {"group_by", group_by},
            {"groups", std::move(rows)},
            {"total", std::move(total)}};
}

std::vector<UsageGroup> groups_from_json(const json& answer) {
    std::vector<UsageGroup> groups;
    for (const auto& row : answer.at("groups")) {
        UsageGroup g;
        g.key = row.at("key").get<std::string>();
        g.sandboxes = row.at("sandboxes").get<std::size_t>();
        g.totals = totals_from_json(row);
        groups.push_back(std::move(g));
    }
    return groups;
}

void merge_groups(std::vector<UsageGroup>& groups, const std::vector<UsageGroup>& more) {
    for (const auto& g : more) {
        auto same = std::find_if(groups.begin(), groups.end(),
                                 [&](const UsageGroup& other) { return other.key == g.key; });
        if (same == groups.end()) {
            groups.push_back(g);
            continue;
        }
        same->sandboxes += g.sandboxes;
        same->totals.add(g.totals);
    }
    std::sort(groups.begin(), groups.end(),
              [](const UsageGroup& a, const UsageGroup& b) { return a.key < b.key; });
}

std::string usage_csv(const std::vector<UsageGroup>& groups, const Prices& prices) {
    auto quoted = [](const std::string& text) {
        std::string out = "\"";
        for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
        return out + "\"";
    };
    std::string csv =
        "key,sandboxes,cpu_seconds,vcpu_seconds,memory_gib_seconds,memory_reserved_gib_seconds,"
        "disk_gib_seconds,disk_peak_bytes,egress_bytes,ingress_bytes,lifetime_seconds,"
        "paused_seconds";
    csv += prices.any() ? ",cost\n" : "\n";
    char line[512];
    for (const auto& g : groups) {
        const auto& t = g.totals;
        std::snprintf(line, sizeof line, ",%zu,%.3f,%.3f,%.6f,%.6f,%.6f,%llu,%llu,%llu,%.3f,%.3f",
                      g.sandboxes, t.cpu_seconds, t.vcpu_seconds, t.memory_gib_seconds,
                      t.memory_reserved_gib_seconds, t.disk_gib_seconds,
                      static_cast<unsigned long long>(t.disk_peak_bytes),
                      static_cast<unsigned long long>(t.egress_bytes),
                      static_cast<unsigned long long>(t.ingress_bytes), t.lifetime_seconds,
                      t.paused_seconds);
        csv += quoted(g.key) + line;
        if (prices.any()) {
            std::snprintf(line, sizeof line, ",%.6f", cost_of(t, prices));
            csv += line;
        }
        csv += "\n";
    }
    return csv;
}

}  // namespace deskbox::server::usage
