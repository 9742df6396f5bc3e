// POST /v1/sandboxes: the request body checked field by field (unknown fields, wrong types,
// values out of range: SandboxError (invalid) naming the field) into a SandboxConfig, with the
// template's session settings under the request's own and the server's defaults for the rest.
// Pure: the template's definition comes from the caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/network/network_policy.hpp"
#include "server/sandbox/sandbox_config.hpp"
#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {

// What a request may leave out, and the longest timeout it may ask for (ManagerOptions).
struct CreateDefaults {
    std::string template_name = "minimal";
    std::string runtime_name = "container";
    std::chrono::seconds timeout{300};
    std::chrono::seconds max_timeout{24 * 3600};
    std::uint64_t disk_mb = 8192;
    network::NetworkPolicy network = network::NetworkPolicy::open();
};

// A template's definition (images/templates/<name>/template.json) by name. Throws
// SandboxError (invalid for a template that does not exist).
using TemplateDefinitionLookup = std::function<nlohmann::json(const std::string& name)>;

struct CreateRequest {
    SandboxConfig config;       // id, recordings_dir and pooled are left for the server to set
    nlohmann::json definition;  // the template's, looked up once
};

// The template's `ready` condition (its `ready` object, else the default: as many windows as its
// session.autostart has entries). A bad `ready` is SandboxError (failed) template_error naming
// "template.ready.<field>" (images/build.py refuses such a definition too).
ReadyCondition template_ready_condition(const nlohmann::json& definition);

// The runtime's name is taken as given: whether a runtime of that name exists is the
// server's to say.
CreateRequest parse_create_request(const nlohmann::json& request, const CreateDefaults& defaults,
                                   const TemplateDefinitionLookup& template_definition);

}  // namespace deskbox::server
