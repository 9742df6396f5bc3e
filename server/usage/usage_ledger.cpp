#include "server/usage/usage_ledger.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <system_error>

#include "common/atomic_file.hpp"

namespace deskbox::server::usage {

using nlohmann::json;

namespace {

std::uint64_t minus(std::uint64_t a, std::uint64_t b) {
    return a > b ? a - b : 0;
}

std::system_error io_error(const std::string& what, const std::filesystem::path& path) {
    return {errno, std::generic_category(), what + " " + path.string()};
}

json start_to_json(const SandboxStart& s) {
    return {{"kind", "start"},      {"id", s.id},
            {"at", s.at},           {"template", s.template_name},
            {"runtime", s.runtime}, {"metadata", s.metadata},
            {"vcpus", s.vcpus},     {"memory_mb", s.memory_mb},
            {"disk_mb", s.disk_mb}};
}

SandboxStart start_from_json(const json& j) {
    SandboxStart s;
    s.id = j.at("id").get<std::string>();
    s.at = j.at("at").get<Millis>();
    s.template_name = j.value("template", "");
    s.runtime = j.value("runtime", "");
    if (j.contains("metadata") && j["metadata"].is_object()) s.metadata = j["metadata"];
    s.vcpus = j.value("vcpus", 0.0);
    s.memory_mb = j.value("memory_mb", std::uint64_t{0});
    s.disk_mb = j.value("disk_mb", std::uint64_t{0});
    return s;
}

json sample_line(const std::string& id, const UsageSample& s) {
    json j = to_json(s);
    j["kind"] = "sample";
    j["id"] = id;
    json raw = {{"net_out", s.raw.net_out}, {"net_in", s.raw.net_in}};
    if (s.raw.cpu_ns) raw["cpu_ns"] = *s.raw.cpu_ns;
    j["raw"] = raw;
    return j;
}

UsageSample sample_from_json(const json& j) {
    UsageSample s;
    s.at = j.at("at").get<Millis>();
    s.paused = j.value("state", "running") == "paused";
    s.cpu_percent = j.value("cpu_percent", 0.0);
    s.memory_resident_bytes = j.value("memory_resident_bytes", std::uint64_t{0});
    s.memory_reserved_bytes = j.value("memory_reserved_bytes", std::uint64_t{0});
    s.disk_bytes = j.value("disk_bytes", std::uint64_t{0});
    s.net_out_bytes = j.value("net_out_bytes", std::uint64_t{0});
    s.net_in_bytes = j.value("net_in_bytes", std::uint64_t{0});
    s.totals = totals_from_json(j.value("totals", json::object()));
    const json raw = j.value("raw", json::object());
    if (raw.contains("cpu_ns")) s.raw.cpu_ns = raw["cpu_ns"].get<std::uint64_t>();
    s.raw.net_out = raw.value("net_out", std::uint64_t{0});
    s.raw.net_in = raw.value("net_in", std::uint64_t{0});
    return s;
}

// The last sample at or before each UTC midnight (what totals_at(midnight) answers), and the
// last one of all.
std::vector<UsageSample> daily_checkpoints(const std::vector<UsageSample>& samples) {
    auto day = [](Millis at) { return (at - 1) / kDayMs; };  // midnight ends the day before
    std::vector<UsageSample> kept;
    for (std::size_t i = 0; i < samples.size(); ++i) {
        const bool last = i + 1 == samples.size();
        if (last || day(samples[i].at) != day(samples[i + 1].at)) kept.push_back(samples[i]);
    }
    return kept;
}

}  // namespace

UsageTotals UsageTotals::since(const UsageTotals& e) const {
    UsageTotals d = *this;
    d.cpu_seconds = std::max(0.0, cpu_seconds - e.cpu_seconds);
    d.vcpu_seconds = std::max(0.0, vcpu_seconds - e.vcpu_seconds);
    d.memory_gib_seconds = std::max(0.0, memory_gib_seconds - e.memory_gib_seconds);
    d.memory_reserved_gib_seconds =
        std::max(0.0, memory_reserved_gib_seconds - e.memory_reserved_gib_seconds);
    d.disk_gib_seconds = std::max(0.0, disk_gib_seconds - e.disk_gib_seconds);
    d.egress_bytes = minus(egress_bytes, e.egress_bytes);
    d.ingress_bytes = minus(ingress_bytes, e.ingress_bytes);
    d.lifetime_seconds = std::max(0.0, lifetime_seconds - e.lifetime_seconds);
    d.paused_seconds = std::max(0.0, paused_seconds - e.paused_seconds);
    return d;
}

void UsageTotals::add(const UsageTotals& o) {
    cpu_seconds += o.cpu_seconds;
    vcpu_seconds += o.vcpu_seconds;
    memory_gib_seconds += o.memory_gib_seconds;
    memory_reserved_gib_seconds += o.memory_reserved_gib_seconds;
    disk_gib_seconds += o.disk_gib_seconds;
    disk_peak_bytes = std::max(disk_peak_bytes, o.disk_peak_bytes);
    egress_bytes += o.egress_bytes;
    ingress_bytes += o.ingress_bytes;
    lifetime_seconds += o.lifetime_seconds;
    paused_seconds += o.paused_seconds;
}

json to_json(const UsageTotals& t) {
    return {{"cpu_seconds", t.cpu_seconds},
            {"vcpu_seconds", t.vcpu_seconds},
            {"memory_gib_seconds", t.memory_gib_seconds},
            {"memory_reserved_gib_seconds", t.memory_reserved_gib_seconds},
            {"disk_gib_seconds", t.disk_gib_seconds},
            {"disk_peak_bytes", t.disk_peak_bytes},
            {"egress_bytes", t.egress_bytes},
            {"ingress_bytes", t.ingress_bytes},
            {"lifetime_seconds", t.lifetime_seconds},
            {"paused_seconds", t.paused_seconds}};
}

UsageTotals totals_from_json(const json& j) {
    UsageTotals t;
    t.cpu_seconds = j.value("cpu_seconds", 0.0);
    t.vcpu_seconds = j.value("vcpu_seconds", 0.0);
    t.memory_gib_seconds = j.value("memory_gib_seconds", 0.0);
    t.memory_reserved_gib_seconds = j.value("memory_reserved_gib_seconds", 0.0);
    t.disk_gib_seconds = j.value("disk_gib_seconds", 0.0);
    t.disk_peak_bytes = j.value("disk_peak_bytes", std::uint64_t{0});
    t.egress_bytes = j.value("egress_bytes", std::uint64_t{0});
    t.ingress_bytes = j.value("ingress_bytes", std::uint64_t{0});
    t.lifetime_seconds = j.value("lifetime_seconds", 0.0);
    t.paused_seconds = j.value("paused_seconds", 0.0);
    return t;
}

json to_json(const UsageSample& s) {
    return {{"at", s.at},
            {"state", s.paused ? "paused" : "running"},
            {"cpu_percent", s.cpu_percent},
            {"memory_resident_bytes", s.memory_resident_bytes},
            {"memory_reserved_bytes", s.memory_reserved_bytes},
            {"disk_bytes", s.disk_bytes},
            {"net_out_bytes", s.net_out_bytes},
            {"net_in_bytes", s.net_in_bytes},
            {"totals", to_json(s.totals)}};
}

UsageTotals SandboxHistory::totals_at(Millis t) const {
    if (ended_at && end_totals && t >= *ended_at) return *end_totals;
    auto after = std::upper_bound(samples.begin(), samples.end(), t,
                                  [](Millis at, const UsageSample& s) { return at < s.at; });
    if (after == samples.begin()) return {};
    return std::prev(after)->totals;
}

Millis SandboxHistory::last_at() const {
    Millis last = start.at;
    if (!samples.empty()) last = std::max(last, samples.back().at);
    if (ended_at) last = std::max(last, *ended_at);
    return last;
}

UsageLedger::UsageLedger(std::filesystem::path dir, std::chrono::hours keep)
    : dir_(std::move(dir)), file_(dir_ / "ledger.jsonl"), keep_(keep) {
    std::filesystem::create_directories(dir_);
    std::ifstream in(file_);
    std::string line;
    bool torn_end = false;
    while (std::getline(in, line)) {
        torn_end = in.eof();  // the last line had no newline: cut short by a crash
        const json j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) continue;
        try {
            apply(j);
        } catch (const json::exception&) {
            // A line of a newer or broken format: what it says is lost, not the rest.
        }
    }
    fd_ = UniqueFd(::open(file_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!fd_) throw io_error("cannot open", file_);
    // Ends a torn line, so the next one starts on a line of its own.
    if (torn_end && ::write(fd_.get(), "\n", 1) != 1) throw io_error("cannot write", file_);
}

void UsageLedger::apply(const json& line) {
    const std::string kind = line.at("kind").get<std::string>();
    const std::string id = line.at("id").get<std::string>();
    if (kind == "start") {
        histories_[id].start = start_from_json(line);
        return;
    }
    auto it = histories_.find(id);
    if (it == histories_.end()) return;  // its start was pruned or never written
    SandboxHistory& h = it->second;
    if (kind == "sample") {
        UsageSample s = sample_from_json(line);
        if (h.samples.empty() || s.at > h.samples.back().at) h.samples.push_back(std::move(s));
    } else if (kind == "end") {
        h.ended_at = line.at("at").get<Millis>();
        h.end_totals = totals_from_json(line.value("totals", json::object()));
    }
}

void UsageLedger::append(const json& line) {
    const std::string text = line.dump() + "\n";
    // One write of a short line to an O_APPEND file: whole, or torn only by a crash.
    const ssize_t written = ::write(fd_.get(), text.data(), text.size());
    if (written != static_cast<ssize_t>(text.size())) throw io_error("cannot append to", file_);
}

void UsageLedger::record_start(const SandboxStart& start) {
    std::lock_guard lock(mutex_);
    const json line = start_to_json(start);
    append(line);
    apply(line);
}

void UsageLedger::record_sample(const std::string& id, const UsageSample& sample) {
    std::lock_guard lock(mutex_);
    const json line = sample_line(id, sample);
    append(line);
    apply(line);
}

void UsageLedger::record_end(const std::string& id, Millis at) {
    std::lock_guard lock(mutex_);
    auto it = histories_.find(id);
    if (it == histories_.end() || it->second.ended_at) return;
    const UsageTotals last =
        it->second.samples.empty() ? UsageTotals{} : it->second.samples.back().totals;
    const json line = {{"kind", "end"}, {"id", id}, {"at", at}, {"totals", to_json(last)}};
    append(line);
    apply(line);
}

std::optional<SandboxHistory> UsageLedger::history(const std::string& id) const {
    std::lock_guard lock(mutex_);
    auto it = histories_.find(id);
    if (it == histories_.end()) return std::nullopt;
    return it->second;
}

std::vector<SandboxHistory> UsageLedger::overlapping(Millis from, Millis to) const {
    std::lock_guard lock(mutex_);
    std::vector<SandboxHistory> found;
    for (const auto& [id, h] : histories_) {
        const Millis end = h.ended_at ? *h.ended_at : h.last_at();
        // A sandbox still open may have used resources up to now: its last sample is all
        // we know, and a period after it adds nothing.
        if (h.start.at <= to && end >= from) found.push_back(h);
    }
    return found;
}

std::vector<std::string> UsageLedger::open_ids() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> ids;
    for (const auto& [id, h] : histories_)
        if (!h.ended_at) ids.push_back(id);
    return ids;
}

std::vector<double> UsageLedger::ended_lifetimes() const {
    std::lock_guard lock(mutex_);
    std::vector<double> lifetimes;
    for (const auto& [id, h] : histories_)
        if (h.ended_at) lifetimes.push_back((*h.ended_at - h.start.at) / 1000.0);
    return lifetimes;
}

std::size_t UsageLedger::prune(Millis now) {
    std::lock_guard lock(mutex_);
    const Millis horizon =
        now - std::chrono::duration_cast<std::chrono::milliseconds>(keep_).count();
    std::size_t dropped = 0;
    for (auto& [id, h] : histories_) {
        if (!h.ended_at || *h.ended_at >= horizon) continue;
        auto kept = daily_checkpoints(h.samples);
        dropped += h.samples.size() - kept.size();
        h.samples = std::move(kept);
    }
    if (dropped == 0) return 0;
    std::string text;
    for (const auto& [id, h] : histories_) {
        text += start_to_json(h.start).dump() + "\n";
        for (const auto& s : h.samples) text += sample_line(id, s).dump() + "\n";
        if (h.ended_at)
            text += json{{"kind", "end"},
                         {"id", id},
                         {"at", *h.ended_at},
                         {"totals", to_json(h.end_totals.value_or(UsageTotals{}))}}
                        .dump() +
                    "\n";
    }
    atomic_file::write(file_, text, {0600, atomic_file::Durability::power_loss});
    fd_ = UniqueFd(::open(file_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    if (!fd_) throw io_error("cannot open", file_);
    return dropped;
}

}  // namespace deskbox::server::usage
