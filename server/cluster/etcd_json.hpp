// What etcd's JSON gateway sends, read into our types: int64 fields come as strings (and zero
// values are left out), keys and values as base64. Shared by the client and the watch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/cluster/etcd_client.hpp"

namespace deskbox::cluster::etcd_json {

// Throws EtcdError when present but malformed.
std::int64_t number(const nlohmann::json& object, const char* name);
std::string bytes(const nlohmann::json& object, const char* name);  // base64 field, "" if absent
KeyValue key_value(const nlohmann::json& kv);
std::vector<KeyValue> key_values(const nlohmann::json& answer);  // its "kvs"
std::int64_t header_revision(const nlohmann::json& answer);

}  // namespace deskbox::cluster::etcd_json
