// The metrics and usage APIs over the ledger, pure: typed query parsing (a 400 naming the
// parameter for a bad from, to, step, group_by or format), samples of one sandbox at a step,
// and usage sums over a period grouped by template, a metadata key or UTC day, as JSON or CSV.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/usage/usage_ledger.hpp"

namespace deskbox::server::usage {

using QueryParams = std::map<std::string, std::string>;

// RFC 3339 ("2026-12-07T02:00:00Z", "…T02:00:00.5+01:00") or Unix seconds ("1796000000");
// nullopt if it is neither.
std::optional<Millis> parse_time(std::string_view text);

struct MetricsQuery {
    Millis from = 0, to = 0;
    std::int64_t step_s = 0;  // 0: every sample
};
// ?from&to&step (defaults: the sandbox's start, now, every sample). Throws ApiError 400.
MetricsQuery parse_metrics_query(const QueryParams& query, Millis started, Millis now);
// {"id","from","to","step_s","samples":[...]}: per step, its last sample, with the CPU % and
// network bytes over the whole step.
nlohmann::json metrics_answer(const SandboxHistory& history, const MetricsQuery& query);

enum class GroupBy { none, template_name, metadata, day };

struct UsageQuery {
    Millis from = 0, to = 0;
    GroupBy group_by = GroupBy::none;
    std::string metadata_key;  // GroupBy::metadata
    bool csv = false;
};
// ?from&to&group_by&format (defaults: everything recorded, now, no groups, json). Throws
// ApiError 400.
UsageQuery parse_usage_query(const QueryParams& query, Millis now);

struct UsageGroup {
    std::string key;  // the template, the metadata value ("" without it), the day, or "all"
    std::size_t sandboxes = 0;
    UsageTotals totals;
};
// What the histories used in the period, by group (sorted by key; groups that used nothing
// are left out).
std::vector<UsageGroup> summarise(const std::vector<SandboxHistory>& histories,
                                  const UsageQuery& query);

struct Prices {
    double vcpu_second = 0, gib_second = 0;
    bool any() const { return vcpu_second > 0 || gib_second > 0; }
};
double cost_of(const UsageTotals& totals, const Prices& prices);
// The groups of a usage_json answer (another node's). Throws nlohmann::json::exception on
// another shape.
std::vector<UsageGroup> groups_from_json(const nlohmann::json& answer);
// `more` added into `groups` by key (sandboxes and totals summed), sorted by key.
void merge_groups(std::vector<UsageGroup>& groups, const std::vector<UsageGroup>& more);
nlohmann::json usage_json(const std::vector<UsageGroup>& groups, const UsageQuery& query,
                          const Prices& prices);
std::string usage_csv(const std::vector<UsageGroup>& groups, const Prices& prices);

}  // namespace deskbox::server::usage
