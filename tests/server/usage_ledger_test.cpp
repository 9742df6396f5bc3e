// The usage ledger on a real file: replaying is idempotent (a line twice changes nothing), a
// line torn by a crash is skipped and the next one starts on its own line, pruning keeps a
// sandbox's daily totals; the queries sum periods and groups right and refuse bad parameters.
#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.hpp"
#include "server/http/api_error.hpp"
#include "server/usage/usage_query.hpp"

namespace deskbox::server::usage {
namespace {

constexpr Millis kDay = 24LL * 3600 * 1000;
const Millis kT0 = 20000 * kDay;  // 2024-10-04T00:00:00Z

SandboxStart start_of(const std::string& id, const std::string& customer, Millis at) {
    SandboxStart s;
    s.id = id;
    s.template_name = "minimal";
    s.runtime = "container";
    s.metadata = {{"customer", customer}};
    s.vcpus = 2;
    s.memory_mb = 1024;
    s.at = at;
    return s;
}

// A sample whose totals grow by one CPU second and one second of life per second.
UsageSample sample_at(Millis start, Millis at) {
    UsageSample s;
    s.at = at;
    s.totals.cpu_seconds = (at - start) / 1000.0;
    s.totals.lifetime_seconds = (at - start) / 1000.0;
    s.totals.vcpu_seconds = 2 * (at - start) / 1000.0;
    s.raw.cpu_ns = static_cast<std::uint64_t>(at - start) * 1'000'000;
    return s;
}

void append_text(const std::filesystem::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::app);
    out << text;
}

TEST(UsageLedger, ReplayIsIdempotentAndSkipsATornLine) {
    TempDir dir("usage-ledger");
    {
        UsageLedger ledger(dir.path(), std::chrono::hours(24));
        ledger.record_start(start_of("sb-1", "a", kT0));
        for (int i = 1; i <= 3; ++i) ledger.record_sample("sb-1", sample_at(kT0, kT0 + i * 1000));
    }
    // The same lines again (a replay of a copy) and a crash mid-line.
    std::ifstream in(dir.path() / "ledger.jsonl");
    const std::string once((std::istreambuf_iterator<char>(in)), {});
    append_text(dir.path() / "ledger.jsonl", once + R"({"kind":"sample","id":"sb-1","at":)");
    {
        UsageLedger ledger(dir.path(), std::chrono::hours(24));
        auto history = ledger.history("sb-1");
        ASSERT_TRUE(history);
        EXPECT_EQ(history->samples.size(), 3u);
        EXPECT_DOUBLE_EQ(history->totals_at(kT0 + 10'000).cpu_seconds, 3.0);
        EXPECT_DOUBLE_EQ(history->totals_at(kT0 + 2500).cpu_seconds, 2.0);
        EXPECT_DOUBLE_EQ(history->totals_at(kT0 - 1).cpu_seconds, 0.0);
        ledger.record_sample("sb-1", sample_at(kT0, kT0 + 4000));
    }
    UsageLedger ledger(dir.path(), std::chrono::hours(24));
    EXPECT_EQ(ledger.history("sb-1")->samples.size(), 4u) << "the line after the torn one counts";
    EXPECT_EQ(ledger.open_ids(), std::vector<std::string>{"sb-1"});
}

TEST(UsageLedger, PruningKeepsTheDailyTotalsOfSandboxesLongGone) {
    TempDir dir("usage-ledger");
    UsageLedger ledger(dir.path(), std::chrono::hours(1));
    ledger.record_start(start_of("sb-1", "a", kT0));
    // Two days of a sample every ten minutes.
    for (Millis at = kT0 + 600'000; at <= kT0 + 2 * kDay; at += 600'000)
        ledger.record_sample("sb-1", sample_at(kT0, at));
    ledger.record_end("sb-1", kT0 + 2 * kDay);
    const auto before = ledger.history("sb-1")->totals_at(kT0 + kDay);
    EXPECT_EQ(ledger.prune(kT0 + 2 * kDay + 1000), 0u) << "ended less than an hour ago";
    EXPECT_GT(ledger.prune(kT0 + 3 * kDay), 280u);
    UsageLedger reread(dir.path(), std::chrono::hours(1));
    auto history = reread.history("sb-1");
    ASSERT_TRUE(history);
    EXPECT_LE(history->samples.size(), 3u);
    EXPECT_DOUBLE_EQ(history->totals_at(kT0 + kDay).cpu_seconds, before.cpu_seconds);
    EXPECT_DOUBLE_EQ(history->totals_at(kT0 + 5 * kDay).cpu_seconds, 2 * 86400.0);

    UsageQuery by_day;
    by_day.from = kT0;
    by_day.to = kT0 + 2 * kDay;
    by_day.group_by = GroupBy::day;
    const auto days = summarise(reread.overlapping(by_day.from, by_day.to), by_day);
    ASSERT_EQ(days.size(), 2u);
    EXPECT_EQ(days[0].key, "2024-10-04");
    EXPECT_NEAR(days[0].totals.cpu_seconds, 86400.0, 1e-6);
    EXPECT_NEAR(days[1].totals.cpu_seconds, 86400.0, 1e-6);
}

TEST(UsageQuery, SumsAPeriodByMetadataWithACost) {
    TempDir dir("usage-ledger");
    UsageLedger ledger(dir.path(), std::chrono::hours(24));
    for (const auto& [id, customer] : {std::pair{"sb-1", "a"}, {"sb-2", "a"}, {"sb-3", "b"}}) {
        ledger.record_start(start_of(id, customer, kT0));
        for (int i = 1; i <= 10; ++i) ledger.record_sample(id, sample_at(kT0, kT0 + i * 1000));
    }
    UsageQuery q =
        parse_usage_query({{"from", "20000"}, {"group_by", "metadata.customer"}}, kT0 + kDay);
    EXPECT_EQ(q.from, 20'000'000);
    q.from = kT0 + 2000;
    q.to = kT0 + 6000;
    const auto groups = summarise(ledger.overlapping(q.from, q.to), q);
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(groups[0].key, "a");
    EXPECT_EQ(groups[0].sandboxes, 2u);
    EXPECT_DOUBLE_EQ(groups[0].totals.cpu_seconds, 8.0);
    EXPECT_DOUBLE_EQ(groups[1].totals.cpu_seconds, 4.0);
    const Prices prices{0.5, 0};
    EXPECT_DOUBLE_EQ(cost_of(groups[1].totals, prices), 4.0);  // 8 vCPU-seconds × 0.5
    const std::string csv = usage_csv(groups, prices);
    EXPECT_NE(csv.find("\"b\",1,4.000,8.000,"), std::string::npos) << csv;
    EXPECT_NE(csv.find(",4.000000\n"), std::string::npos) << csv;
}

TEST(UsageQuery, TimesAndBadParameters) {
    EXPECT_EQ(parse_time("1970-01-02T00:00:00Z"), 86'400'000);
    EXPECT_EQ(parse_time("1970-01-02T01:00:00.25+01:00"), 86'400'250);
    EXPECT_EQ(parse_time("86400"), 86'400'000);
    for (const char* bad : {"", "yesterday", "2026-02-30T00:00:00Z", "2026-12-01", "-5",
                            "2026-12-01T00:00:00", "2026-12-01T24:00:00Z"})
        EXPECT_FALSE(parse_time(bad)) << bad;
    auto field_of = [](const QueryParams& query) {
        try {
            parse_usage_query(query, 1000);
        } catch (const ApiError& e) {
            EXPECT_EQ(e.status(), 400u);
            return e.field();
        }
        return std::string("accepted");
    };
    EXPECT_EQ(field_of({{"group_by", "metadata."}}), "group_by");
    EXPECT_EQ(field_of({{"group_by", "metadata." + std::string(65, 'k')}}), "group_by");
    EXPECT_EQ(field_of({{"format", "xml"}}), "format");
    EXPECT_EQ(field_of({{"from", "2"}, {"to", "1"}}), "to");
    EXPECT_EQ(field_of({{"step", "1"}}), "step");  // not a usage parameter
    EXPECT_EQ(field_of({{"group_by", "metadata.team"}}), "accepted");
    EXPECT_THROW(parse_metrics_query({{"step", "0"}}, 0, 1000), ApiError);
    EXPECT_EQ(parse_metrics_query({{"step", "60"}}, 0, 1000).step_s, 60);
}

}  // namespace
}  // namespace deskbox::server::usage
