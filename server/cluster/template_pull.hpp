// Brings a template users built on another node into this node's store, so a sandbox placed
// here can start from it: GET /v1/cluster/templates/{image_id}?ref=... on a node that holds it
// (authenticated by the cluster secret), the image stream checked and installed as it arrives
// (template_transfer.hpp). Creates of one template that arrive together share one pull.
#pragma once

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "server/templates/template_store.hpp"

namespace deskbox::cluster {

// A pull that did not install the image: which node it came from, and why (nothing is left).
class PullFailed : public std::runtime_error {
  public:
    PullFailed(std::string node, const std::string& reason)
        : std::runtime_error(reason), node_(std::move(node)) {}
    const std::string& node() const { return node_; }

  private:
    std::string node_;
};

struct PullSource {
    std::string node;      // its name
    std::string base_url;  // its advertised API
};

class TemplatePuller {
  public:
    TemplatePuller(std::string secret, std::chrono::milliseconds connect_timeout);

    // Installs `ref` (image `image_id`) from `source` into `store`, or waits for the pull of
    // the same already under way and shares its outcome. Throws PullFailed.
    templates::StoredTemplate pull(templates::TemplateStore& store,
                                   const templates::TemplateRef& ref, const std::string& image_id,
                                   const PullSource& source);

    // For /metrics: pulls done (installed), failed, callers that waited for a pull under way
    // instead of starting one, and the bytes and seconds of the last one.
    struct Figures {
        std::uint64_t pulled = 0, failed = 0, joined = 0;
        std::uint64_t last_bytes = 0;
        double last_seconds = 0;
    };
    Figures figures() const;

  private:
    templates::StoredTemplate fetch(templates::TemplateStore& store,
                                    const templates::TemplateRef& ref, const std::string& image_id,
                                    const PullSource& source);
    void pulled(const templates::TemplateRef& ref, const std::string& image_id,
                const PullSource& source, std::uint64_t bytes, double seconds);

    std::string secret_;
    std::chrono::milliseconds connect_timeout_;
    mutable std::mutex mutex_;
    std::map<std::string, std::shared_future<templates::StoredTemplate>> under_way_;
    Figures figures_;
};

}  // namespace deskbox::cluster
