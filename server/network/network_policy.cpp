#include "server/network/network_policy.hpp"

#include <algorithm>
#include <cctype>

#include "server/network/sandbox_link.hpp"

namespace deskbox::network {

using nlohmann::json;

namespace {

std::string shown(std::string_view text) {
    std::string shown(text.substr(0, 80));
    for (char& c : shown)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    return "'" + shown + (text.size() > 80 ? "...'" : "'");
}

}  // namespace

PolicyEntry parse_policy_entry(const json& value, const std::string& field) {
    if (!value.is_string())
        throw PolicyError(field, "expected a string (a domain, *.domain, an IP or a CIDR)");
    const std::string text = value.get<std::string>();
    if (text.empty()) throw PolicyError(field, "empty entry");
    PolicyEntry entry;
    // Something with a digit-or-colon shape is an address; names may start with digits too
    // ("1password.com"), so try the address parse first and fall back to a name.
    std::string range_error;
    if (auto range = parse_ip_range(text, &range_error)) {
        entry.kind = PolicyEntry::Kind::range;
        entry.range = *range;
        return entry;
    }
    const bool looks_like_address =
        text.find(':') != std::string::npos || text.find('/') != std::string::npos ||
        std::all_of(text.begin(), text.end(),
                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
    if (looks_like_address) throw PolicyError(field, shown(text) + ": " + range_error);
    std::string_view name = text;
    if (name.rfind("*.", 0) == 0) {
        entry.kind = PolicyEntry::Kind::wildcard;
        name.remove_prefix(2);
    } else if (name.find('*') != std::string_view::npos) {
        throw PolicyError(
            field, shown(text) + ": a wildcard is only allowed as the first label (*.example.org)");
    }
    auto normalized = normalize_host_name(name);
    if (!normalized)
        throw PolicyError(field,
                          shown(text) + " is not a domain, *.domain, IP address or CIDR range");
    if (entry.kind == PolicyEntry::Kind::wildcard &&
        std::all_of(normalized->begin(), normalized->end(),
                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }))
        throw PolicyError(field, shown(text) +
                                     ": a wildcard is for names; allow addresses by "
                                     "CIDR (1.2.3.0/24)");
    if (entry.kind == PolicyEntry::Kind::wildcard && normalized->find('.') == std::string::npos)
        throw PolicyError(field, shown(text) +
                                     ": a wildcard needs at least two labels after "
                                     "'*.' (*.example.org, not *.org)");
    entry.domain = *normalized;
    return entry;
}

namespace {

std::vector<PolicyEntry> parse_list(const json& value, const std::string& field) {
    if (!value.is_array()) throw PolicyError(field, "expected an array of strings");
    if (value.size() > kMaxPolicyEntries)
        throw PolicyError(field, "at most " + std::to_string(kMaxPolicyEntries) + " entries");
    std::vector<PolicyEntry> out;
    for (std::size_t i = 0; i < value.size(); ++i)
        out.push_back(parse_policy_entry(value[i], field + "[" + std::to_string(i) + "]"));
    return out;
}

json list_to_json(const std::vector<PolicyEntry>& entries) {
    json out = json::array();
    for (const auto& e : entries) out.push_back(e.to_string());
    return out;
}

Verdict pass(std::string reason) {
    return Verdict{true, std::move(reason)};
}
Verdict refuse(std::string reason) {
    return Verdict{false, std::move(reason)};
}

std::string not_listed(const IpAddress& address) {
    return address.to_string() + " is not in the allow list (connect by an allowed name)";
}

const IpRange& link_range() {
    static const IpRange range = *parse_ip_range(kLinkRange);
    return range;
}

}  // namespace

std::optional<std::string> normalize_host_name(std::string_view name) {
    if (!name.empty() && name.back() == '.') name.remove_suffix(1);
    if (name.empty() || name.size() > 253) return std::nullopt;
    std::string out;
    out.reserve(name.size());
    std::size_t label = 0;
    char previous = '.';
    for (char c : name) {
        if (c == '.') {
            // Labels neither start nor end with '-' (RFC 1123).
            if (label == 0 || previous == '-') return std::nullopt;
            label = 0;
            previous = c;
            out.push_back('.');
            continue;
        }
        const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        if (!ok || ++label > 63 || (c == '-' && label == 1)) return std::nullopt;
        previous = c;
        out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    if (label == 0 || previous == '-') return std::nullopt;
    return out;
}

bool PolicyEntry::matches_name(std::string_view name) const {
    switch (kind) {
        case Kind::domain:
            return name == domain;
        case Kind::wildcard:
            return name.size() > domain.size() + 1 &&
                   name.substr(name.size() - domain.size()) == domain &&
                   name[name.size() - domain.size() - 1] == '.';
        case Kind::range:
            return false;
    }
    return false;
}

std::string PolicyEntry::to_string() const {
    switch (kind) {
        case Kind::domain:
            return domain;
        case Kind::wildcard:
            return "*." + domain;
        case Kind::range:
            return range.prefix == (range.base.is_v4() ? 32 : 128) ? range.base.to_string()
                                                                   : range.to_string();
    }
    return {};
}

NetworkPolicy NetworkPolicy::closed() {
    return NetworkPolicy{};
}

NetworkPolicy NetworkPolicy::open() {
    NetworkPolicy p;
    p.enabled_ = true;
    return p;
}

namespace {

// A name the operator gave a proxy: [a-z0-9_-]{1,32} (the URL stays in the server's config).
std::string parse_proxy_name(const json& value, const std::string& field) {
    if (!value.is_string()) throw PolicyError(field, "expected the name of an egress proxy");
    const std::string name = value.get<std::string>();
    if (name.empty() || name.size() > 32 || !std::all_of(name.begin(), name.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        }))
        throw PolicyError(field, "a proxy name is 1..32 of [a-z0-9_-]");
    return name;
}

}  // namespace

NetworkPolicy NetworkPolicy::parse(const json& value, const std::string& field) {
    if (value.is_boolean()) return value.get<bool>() ? open() : closed();
    if (!value.is_object())
        throw PolicyError(field, "expected true, false or {\"allow\": [...], \"deny\": [...]}");
    NetworkPolicy p;
    p.enabled_ = true;
    // An empty `field`: the policy is the request body itself (PATCH .../network).
    const std::string prefix = field.empty() ? "" : field + ".";
    for (auto& [key, item] : value.items()) {
        if (key == "allow")
            p.allow_ = parse_list(item, prefix + "allow");
        else if (key == "deny")
            p.deny_ = parse_list(item, prefix + "deny");
        else if (key == "rules")
            p.rules_ = CredentialRules::parse(item, prefix + "rules");
        else if (key == "proxy")
            p.proxy_ = parse_proxy_name(item, prefix + "proxy");
        else
            throw PolicyError(prefix + key, "unknown field (allow, deny, rules, proxy)");
    }
    return p;
}

const std::vector<PolicyEntry>& NetworkPolicy::allow() const {
    static const std::vector<PolicyEntry> none;
    return allow_ ? *allow_ : none;
}

bool NetworkPolicy::allows_names() const {
    return std::any_of(allow().begin(), allow().end(),
                       [](const PolicyEntry& e) { return e.kind != PolicyEntry::Kind::range; });
}

bool NetworkPolicy::has_name_rules() const {
    auto named = [](const std::vector<PolicyEntry>& list) {
        return std::any_of(list.begin(), list.end(),
                           [](const PolicyEntry& e) { return e.kind != PolicyEntry::Kind::range; });
    };
    return named(allow()) || named(deny_);
}

json NetworkPolicy::to_json() const {
    if (!enabled_) return false;
    if (!allow_ && deny_.empty() && rules_.empty() && !proxy_) return true;
    json out = json::object();
    if (allow_) out["allow"] = list_to_json(*allow_);
    if (!deny_.empty()) out["deny"] = list_to_json(deny_);
    if (!rules_.empty()) out["rules"] = rules_.to_json();
    if (proxy_) out["proxy"] = *proxy_;
    return out;
}

json NetworkPolicy::describe() const {
    json out = {{"enabled", enabled_}};
    if (!enabled_) {
        out["mode"] = "off";
        out["summary"] = "no interface but loopback";
        return out;
    }
    out["mode"] = allow_ ? "allowlist" : "internet";
    out["allow"] = allow_ ? list_to_json(*allow_) : json("all public addresses");
    out["deny"] = list_to_json(deny_);
    if (!rules_.empty()) out["rules"] = rules_.describe();
    if (proxy_) out["proxy"] = *proxy_;
    out["always_blocked"] =
        json::array({"the host (all its addresses, deskboxd's ports)", "other sandboxes",
                     "loopback and link-local "
                     "(169.254.169.254)",
                     "multicast and broadcast", std::string("this sandbox's link ") + kLinkRange});
    out["blocked_unless_allowed_by_address"] =
        "private and special ranges (RFC 1918, CGNAT, ULA, benchmarking, documentation, ...)";
    out["protocols"] = allow_ ? "TCP (HTTP checked by Host, TLS by SNI); UDP to allowed addresses; "
                                "DNS answers allowed names only"
                              : "TCP and UDP; DNS";
    out["ipv6"] = "not routed (DNS gives IPv4 answers only)";
    return out;
}

const PolicyEntry* NetworkPolicy::allowing_range(const IpAddress& address) const {
    for (const auto& e : allow())
        if (e.kind == PolicyEntry::Kind::range && e.range.contains(address)) return &e;
    return nullptr;
}

const PolicyEntry* NetworkPolicy::denying_range(const IpAddress& address) const {
    for (const auto& e : deny_)
        if (e.kind == PolicyEntry::Kind::range && e.range.contains(address)) return &e;
    return nullptr;
}

const PolicyEntry* NetworkPolicy::denying_name(std::string_view name) const {
    for (const auto& e : deny_)
        if (e.matches_name(name)) return &e;
    return nullptr;
}

const PolicyEntry* NetworkPolicy::allowing_name(std::string_view name) const {
    for (const auto& e : allow())
        if (e.matches_name(name)) return &e;
    return nullptr;
}

Verdict NetworkPolicy::name_verdict(std::string_view name) const {
    if (!enabled_) return refuse("the network is off");
    if (auto* e = denying_name(name)) return refuse("denied by " + e->to_string());
    if (!allow_) return pass("the internet");
    if (auto* e = allowing_name(name)) return pass("allowed by " + e->to_string());
    return refuse("not in the allow list");
}

Verdict NetworkPolicy::address_verdict(const IpAddress& raw, const HostView& host,
                                       bool& explicitly_allowed) const {
    explicitly_allowed = false;
    IpAddress address = canonical(raw);
    if (!enabled_) return refuse("the network is off");
    if (link_range().contains(address)) return refuse("the sandbox's own link");
    if (host.is_host && host.is_host(address)) return refuse("an address of the host");
    auto cls = classify(address);
    if (cls.kind == AddressKind::special)
        for (const auto& range : host.public_ranges)
            if (range.contains(address)) cls = AddressClass{};
    if (cls.kind == AddressKind::never) return refuse(std::string(cls.what) + " address");
    if (auto* e = denying_range(address)) return refuse("denied by " + e->to_string());
    if (auto* e = allowing_range(address)) {
        explicitly_allowed = true;
        return pass("allowed by " + e->to_string());
    }
    if (cls.kind == AddressKind::special)
        return refuse(std::string(cls.what) + " address (" + cls.range +
                      "); allow it by address to reach it");
    return pass("public address");
}

Verdict NetworkPolicy::answer_verdict(const IpAddress& address, const HostView& host) const {
    bool explicit_allow = false;
    return address_verdict(address, host, explicit_allow);
}

std::optional<Verdict> NetworkPolicy::decide_by_address(const IpAddress& address,
                                                        const HostView& host) const {
    bool explicit_allow = false;
    Verdict by_address = address_verdict(address, host, explicit_allow);
    if (!by_address.allowed) return by_address;
    const bool names_deny = std::any_of(deny_.begin(), deny_.end(), [](const PolicyEntry& e) {
        return e.kind != PolicyEntry::Kind::range;
    });
    if (names_deny) return std::nullopt;  // a denied name may still arrive
    if (explicit_allow) return by_address;
    if (!allow_) return pass("the internet");
    if (!allows_names()) return refuse(not_listed(address));
    return std::nullopt;
}

Verdict NetworkPolicy::decide(const Destination& d, const HostView& host) const {
    bool explicit_allow = false;
    Verdict by_address = address_verdict(d.address, host, explicit_allow);
    if (!by_address.allowed) return by_address;
    if (d.name) {
        if (auto* e = denying_name(*d.name)) return refuse("denied by " + e->to_string());
    }
    if (explicit_allow) return by_address;
    if (!allow_) return pass("the internet");
    // Addresses only: no name, and so no DNS answer, can open this one.
    if (!allows_names()) return refuse(not_listed(d.address));
    // An allow list, and the address itself is not on it: only an allowed name opens it.
    if (d.name) {
        if (!allowing_name(*d.name)) return refuse("'" + *d.name + "' is not in the allow list");
        if (!d.name_resolves_to_address)
            return refuse("'" + *d.name + "' does not resolve to " + d.address.to_string());
        return pass("allowed by " + allowing_name(*d.name)->to_string());
    }
    // No name: HTTP without Host, TLS without SNI, or an IP literal. Only protocols that carry
    // no name at all may use an address DNS gave out for an allowed name.
    if (d.protocol == WireProtocol::other && d.learned_from_dns)
        return pass("an address DNS gave for an allowed name");
    return refuse(not_listed(d.address));
}

}  // namespace deskbox::network
