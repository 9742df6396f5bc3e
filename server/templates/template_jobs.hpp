// One build as the service keeps it (private to template_service*.cpp).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "server/network/sandbox_network.hpp"
#include "server/templates/template_service.hpp"

namespace deskbox::templates {

std::string now_rfc3339();

struct TemplateService::Job {
    BuildInfo info;  // guarded by the service's mutex
    BuildRequest request;
    std::filesystem::path dir;               // builds/<id>: build.json, log
    std::filesystem::path work;              // work/<id>: context, Dockerfile, the final layer
    std::filesystem::path dockerfile;        // what the engine reads
    std::vector<std::string> shipped_bases;  // deskbox/<name> it stands on
    std::string base;
    bool cancel_requested = false;  // guarded by the service's mutex
    std::optional<std::chrono::steady_clock::time_point> started;
    std::chrono::steady_clock::time_point deadline;
    std::shared_ptr<network::SandboxNetwork> network;
    UniqueFd log_fd;
    std::string partial_line;  // engine output after the last newline
};

}  // namespace deskbox::templates
