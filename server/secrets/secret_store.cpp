#include "server/secrets/secret_store.hpp"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <system_error>

#include "common/atomic_file.hpp"
#include "common/utc_time.hpp"

namespace deskbox::secrets {
namespace {

using Clock = std::chrono::system_clock;

std::int64_t unix_seconds(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

Clock::time_point from_unix(std::int64_t s) {
    return Clock::time_point(std::chrono::seconds(s));
}

void check_value(const std::string& value) {
    if (value.empty() || value.size() > kMaxSecretValue)
        throw SecretError(SecretErrorKind::invalid, "value",
                          "must be 1.." + std::to_string(kMaxSecretValue) + " bytes");
    for (unsigned char c : value)
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            throw SecretError(SecretErrorKind::invalid, "value",
                              "holds a control character: it must fit in an HTTP header value");
}

}  // namespace

void check_secret_name(std::string_view name, const std::string& field) {
    bool ok = !name.empty() && name.size() <= kMaxSecretName;
    for (char c : name)
        ok &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok)
        throw SecretError(SecretErrorKind::invalid, field,
                          "a secret name is 1.." + std::to_string(kMaxSecretName) +
                              " letters, digits, '_', '.' or '-'");
}

nlohmann::json SecretInfo::to_json() const {
    return {{"name", name},
            {"created_at", utc_rfc3339(created_at)},
            {"updated_at", utc_rfc3339(updated_at)}};
}

SecretStore::SecretStore(std::filesystem::path root) : file_(root / "secrets.json") {
    std::filesystem::create_directories(root);
    std::filesystem::permissions(root, std::filesystem::perms::owner_all);
    std::ifstream in(file_);
    if (!in) return;
    std::stringstream text;
    text << in.rdbuf();
    try {
        const auto all = nlohmann::json::parse(text.str());
        for (const auto& [name, record] : all.at("secrets").items()) {
            Entry e;
            e.value = record.at("value").get<std::string>();
            e.info.name = name;
            e.info.created_at = from_unix(record.at("created_unix").get<std::int64_t>());
            e.info.updated_at = from_unix(record.at("updated_unix").get<std::int64_t>());
            entries_.emplace(name, std::move(e));
        }
    } catch (const nlohmann::json::exception& e) {
        // Never quote the file: it holds the values.
        throw std::runtime_error(file_.string() + " is damaged (" + std::to_string(e.id) +
                                 "): move it away to start without secrets");
    }
    ::chmod(file_.c_str(), 0600);
}

bool SecretStore::set(const std::string& name, const std::string& value) {
    check_secret_name(name, "name");
    check_value(value);
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    const bool created = it == entries_.end();
    if (created && entries_.size() >= kMaxSecrets)
        throw SecretError(SecretErrorKind::too_many, "name",
                          "this server holds " + std::to_string(kMaxSecrets) + " secrets already");
    auto previous = created ? std::nullopt : std::optional<Entry>(it->second);
    auto& e = entries_[name];
    const auto now = Clock::now();
    e.info.name = name;
    if (created) e.info.created_at = now;
    e.info.updated_at = now;
    e.value = value;
    try {
        save_locked();
    } catch (...) {
        if (previous)
            e = *previous;
        else
            entries_.erase(name);
        throw;
    }
    return created;
}

std::vector<SecretInfo> SecretStore::list() const {
    std::lock_guard lock(mutex_);
    std::vector<SecretInfo> out;
    for (const auto& [name, e] : entries_) out.push_back(e.info);
    return out;
}

bool SecretStore::exists(const std::string& name) const {
    std::lock_guard lock(mutex_);
    return entries_.count(name) > 0;
}

void SecretStore::remove(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end())
        throw SecretError(SecretErrorKind::not_found, "name", "no secret named " + name);
    Entry previous = it->second;
    entries_.erase(it);
    try {
        save_locked();
    } catch (...) {
        entries_.emplace(name, std::move(previous));
        throw;
    }
}

std::optional<std::string> SecretStore::value(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    return it->second.value;
}

void SecretStore::save_locked() const {
    nlohmann::json all = {{"secrets", nlohmann::json::object()}};
    for (const auto& [name, e] : entries_)
        all["secrets"][name] = {{"value", e.value},
                                {"created_unix", unix_seconds(e.info.created_at)},
                                {"updated_unix", unix_seconds(e.info.updated_at)}};
    try {
        atomic_file::write(file_, all.dump(), {0600, atomic_file::Durability::power_loss});
    } catch (const std::system_error& e) {
        throw SecretError(SecretErrorKind::failed, "",
                          std::string("cannot save secrets: ") + e.what());
    }
}

}  // namespace deskbox::secrets
