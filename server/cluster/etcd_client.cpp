#include "server/cluster/etcd_client.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/base64.hpp"
#include "server/client/api_client.hpp"
#include "server/cluster/etcd_json.hpp"

namespace deskbox::cluster {

using nlohmann::json;

using etcd_json::header_revision;
using etcd_json::key_values;
using etcd_json::number;

namespace {

// gRPC status codes etcd's gateway reports that another member may not have: the member has
// no leader (partitioned), is shutting down, or timed out waiting for the cluster.
constexpr int kGrpcDeadlineExceeded = 4;
constexpr int kGrpcUnavailable = 14;

std::string encode(const std::string& bytes) {
    return base64_encode(bytes);
}

json compare_json(const Compare& c) {
    static const char* const kTargets[] = {"VERSION", "CREATE", "MOD", "VALUE"};
    static const char* const kResults[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
    json out = {{"key", encode(c.key)},
                {"target", kTargets[static_cast<int>(c.target)]},
                {"result", kResults[static_cast<int>(c.result)]}};
    switch (c.target) {
        case Compare::Target::version:
            out["version"] = std::to_string(c.number);
            break;
        case Compare::Target::create_revision:
            out["create_revision"] = std::to_string(c.number);
            break;
        case Compare::Target::mod_revision:
            out["mod_revision"] = std::to_string(c.number);
            break;
        case Compare::Target::value:
            out["value"] = encode(c.value);
            break;
    }
    return out;
}

json operation_json(const Operation& op) {
    switch (op.kind) {
        case Operation::Kind::put: {
            json put = {{"key", encode(op.key)}, {"value", encode(op.value)}};
            if (op.lease != 0) put["lease"] = std::to_string(op.lease);
            return {{"request_put", put}};
        }
        case Operation::Kind::erase: {
            json erase = {{"key", encode(op.key)}};
            if (!op.range_end.empty()) erase["range_end"] = encode(op.range_end);
            return {{"request_delete_range", erase}};
        }
        case Operation::Kind::range: {
            json range = {{"key", encode(op.key)}};
            if (!op.range_end.empty()) range["range_end"] = encode(op.range_end);
            return {{"request_range", range}};
        }
    }
    return {};
}

}  // namespace

Compare Compare::absent(std::string key) {
    return {std::move(key), Target::version, Result::equal, 0, {}};
}
Compare Compare::unchanged_since(std::string key, std::int64_t revision) {
    return {std::move(key), Target::mod_revision, Result::equal, revision, {}};
}
Compare Compare::value_is(std::string key, std::string value) {
    return {std::move(key), Target::value, Result::equal, 0, std::move(value)};
}

Operation Operation::put(std::string key, std::string value, std::int64_t lease) {
    return {Kind::put, std::move(key), std::move(value), {}, lease};
}
Operation Operation::erase(std::string key) {
    return {Kind::erase, std::move(key), {}, {}, 0};
}
Operation Operation::erase_prefix(const std::string& prefix) {
    return {Kind::erase, prefix, {}, prefix_end(prefix), 0};
}
Operation Operation::range(std::string key) {
    return {Kind::range, std::move(key), {}, {}, 0};
}
Operation Operation::range_prefix(const std::string& prefix) {
    return {Kind::range, prefix, {}, prefix_end(prefix), 0};
}

std::string prefix_end(const std::string& prefix) {
    std::string end = prefix;
    while (!end.empty()) {
        auto last = static_cast<unsigned char>(end.back());
        if (last < 0xFF) {
            end.back() = static_cast<char>(last + 1);
            return end;
        }
        end.pop_back();
    }
    return std::string(1, '\0');  // etcd: "\0" as range_end means every key from `key` on
}

std::vector<std::string> parse_endpoints(const std::string& list) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= list.size()) {
        auto comma = list.find(',', start);
        std::string item =
            list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) {
            try {
                client::parse_server_url(item);
            } catch (const std::invalid_argument& e) {
                throw std::invalid_argument("etcd endpoint \"" + item + "\": " + e.what());
            }
            out.push_back(item);
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    if (out.empty()) throw std::invalid_argument("no etcd endpoint given");
    return out;
}

struct EtcdClient::Impl {
    EtcdOptions options;
    std::mutex mutex;
    std::size_t preferred = 0;  // the endpoint that answered last
    std::map<std::size_t, std::vector<std::unique_ptr<client::ApiClient>>> idle;

    std::unique_ptr<client::ApiClient> take(std::size_t endpoint) {
        {
            std::lock_guard lock(mutex);
            auto& pool = idle[endpoint];
            if (!pool.empty()) {
                auto connection = std::move(pool.back());
                pool.pop_back();
                return connection;
            }
        }
        client::ClientOptions client_options;
        client_options.server = options.endpoints[endpoint];
        client_options.connect_timeout = options.connect_timeout;
        client_options.request_timeout = options.request_timeout;
        client_options.max_response_bytes = 256 << 20;
        client_options.user_agent = "deskboxd-cluster";
        return std::make_unique<client::ApiClient>(client_options);
    }

    void give_back(std::size_t endpoint, std::unique_ptr<client::ApiClient> connection) {
        std::lock_guard lock(mutex);
        auto& pool = idle[endpoint];
        if (pool.size() < 8) pool.push_back(std::move(connection));
    }

    // POSTs `body` to `path` on the first member that answers; returns its JSON.
    json call(const std::string& path, const json& body) {
        std::size_t first;
        {
            std::lock_guard lock(mutex);
            first = preferred;
        }
        std::string failures;
        const std::size_t count = options.endpoints.size();
        for (std::size_t attempt = 0; attempt < count; ++attempt) {
            const std::size_t endpoint = (first + attempt) % count;
            auto connection = take(endpoint);
            client::Response response;
            try {
                response =
                    connection->send(client::Method::post, path, body.dump(), "application/json");
            } catch (const client::ConnectionError& e) {
                failures +=
                    (failures.empty() ? "" : "; ") + options.endpoints[endpoint] + ": " + e.what();
                continue;  // the connection is dropped with its broken socket
            }
            json answer = json::parse(response.body, nullptr, false);
            if (response.status == 200 && answer.is_object()) {
                give_back(endpoint, std::move(connection));
                std::lock_guard lock(mutex);
                preferred = endpoint;
                return answer;
            }
            give_back(endpoint, std::move(connection));
            std::string message =
                answer.is_object() ? answer.value("message", answer.value("error", "")) : "";
            if (message.empty()) message = "HTTP " + std::to_string(response.status);
            const int code = answer.is_object() ? answer.value("code", 0) : 0;
            if (code == kGrpcUnavailable || code == kGrpcDeadlineExceeded) {
                failures +=
                    (failures.empty() ? "" : "; ") + options.endpoints[endpoint] + ": " + message;
                continue;  // that member cannot serve now; another may
            }
            throw EtcdError("etcd " + path + ": " + message, false);
        }
        throw EtcdError("no etcd member answered (" + failures + ")", true);
    }
};

EtcdClient::EtcdClient(EtcdOptions options) : impl_(std::make_unique<Impl>()) {
    if (options.endpoints.empty()) throw std::invalid_argument("no etcd endpoint given");
    for (const auto& endpoint : options.endpoints) client::parse_server_url(endpoint);
    impl_->options = std::move(options);
}

EtcdClient::~EtcdClient() = default;

const EtcdOptions& EtcdClient::options() const {
    return impl_->options;
}

std::string EtcdClient::current_endpoint() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->options.endpoints[impl_->preferred];
}

std::optional<KeyValue> EtcdClient::get(const std::string& key) {
    auto found = key_values(impl_->call("/v3/kv/range", {{"key", encode(key)}}));
    if (found.empty()) return std::nullopt;
    return found.front();
}

std::vector<KeyValue> EtcdClient::get_prefix(const std::string& prefix, std::int64_t* revision) {
    json answer = impl_->call("/v3/kv/range",
                              {{"key", encode(prefix)}, {"range_end", encode(prefix_end(prefix))}});
    if (revision) *revision = header_revision(answer);
    return key_values(answer);
}

std::int64_t EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease) {
    json body = {{"key", encode(key)}, {"value", encode(value)}};
    if (lease != 0) body["lease"] = std::to_string(lease);
    return header_revision(impl_->call("/v3/kv/put", body));
}

std::int64_t EtcdClient::erase(const std::string& key) {
    return number(impl_->call("/v3/kv/deleterange", {{"key", encode(key)}}), "deleted");
}

TxnResult EtcdClient::txn(const std::vector<Compare>& compares,
                          const std::vector<Operation>& success,
                          const std::vector<Operation>& failure) {
    json body = {
        {"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
    for (const auto& c : compares) body["compare"].push_back(compare_json(c));
    for (const auto& op : success) body["success"].push_back(operation_json(op));
    for (const auto& op : failure) body["failure"].push_back(operation_json(op));
    json answer = impl_->call("/v3/kv/txn", body);
    TxnResult result;
    result.succeeded = answer.value("succeeded", false);
    result.revision = header_revision(answer);
    if (auto it = answer.find("responses"); it != answer.end() && it->is_array())
        for (const auto& response : *it)
            if (auto range = response.find("response_range"); range != response.end())
                result.ranges.push_back(key_values(*range));
    return result;
}

std::int64_t EtcdClient::grant_lease(std::chrono::seconds ttl) {
    json answer = impl_->call("/v3/lease/grant", {{"TTL", std::to_string(ttl.count())}});
    std::int64_t id = number(answer, "ID");
    if (id == 0) throw EtcdError("etcd granted no lease: " + answer.value("error", ""), false);
    return id;
}

bool EtcdClient::keep_alive(std::int64_t lease) {
    json answer = impl_->call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}});
    // One keep-alive message: {"result":{..., "TTL":"N"}}; a lease etcd no longer has comes
    // back without a TTL.
    const json& result = answer.contains("result") ? answer["result"] : answer;
    return number(result, "TTL") > 0;
}

void EtcdClient::revoke_lease(std::int64_t lease) {
    try {
        impl_->call("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
    } catch (const EtcdError& e) {
        if (e.unreachable()) throw;
        // "requested lease not found": already gone, which is what the caller wants.
    }
}

namespace etcd_json {

std::int64_t number(const json& object, const char* name) {
    auto it = object.find(name);
    if (it == object.end() || it->is_null()) return 0;
    if (it->is_number_integer()) return it->get<std::int64_t>();
    if (it->is_string()) {
        try {
            return std::stoll(it->get<std::string>());
        } catch (const std::exception&) {
        }
    }
    throw EtcdError(std::string("etcd sent a malformed ") + name, false);
}

std::string bytes(const json& object, const char* name) {
    auto it = object.find(name);
    if (it == object.end() || !it->is_string()) return {};
    auto decoded = base64_decode(it->get<std::string>());
    if (!decoded)
        throw EtcdError(std::string("etcd sent a ") + name + " that is not base64", false);
    return *decoded;
}

KeyValue key_value(const json& kv) {
    KeyValue out;
    out.key = bytes(kv, "key");
    out.value = bytes(kv, "value");
    out.create_revision = number(kv, "create_revision");
    out.mod_revision = number(kv, "mod_revision");
    out.version = number(kv, "version");
    out.lease = number(kv, "lease");
    return out;
}

std::vector<KeyValue> key_values(const json& answer) {
    std::vector<KeyValue> out;
    if (auto it = answer.find("kvs"); it != answer.end() && it->is_array())
        for (const auto& kv : *it) out.push_back(key_value(kv));
    return out;
}

std::int64_t header_revision(const json& answer) {
    auto it = answer.find("header");
    return it != answer.end() && it->is_object() ? number(*it, "revision") : 0;
}

}  // namespace etcd_json
}  // namespace deskbox::cluster
