// The sandbox manager's side of templates: where a template's definition and rootfs come from
// (shipped under images/templates/, or built by users), the template service it starts (with
// the build engine's user namespace on the last slot of --userns-range, or the reason builds are
// refused), the questions it answers for it, and what templates each runtime offers here.
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "common/child_process.hpp"
#include "server/runtime/container/user_namespace.hpp"
#include "server/sandbox/sandbox_manager.hpp"

namespace deskbox::server {

std::vector<std::string> SandboxManager::shipped_template_names() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(options_.images_dir / "templates", ec))
        if (std::filesystem::exists(e.path() / "template.json"))
            names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
}

nlohmann::json SandboxManager::template_definition(const std::string& name) const {
    if (name.find('/') != std::string::npos || name.starts_with("."))
        throw invalid_field("template", "unknown template '" + name + "'");
    auto path = options_.images_dir / "templates" / name / "template.json";
    if (!std::filesystem::exists(path))
        if (auto user = user_template(name)) return user->definition;
    std::ifstream in(path);
    if (!in) throw invalid_field("template", "unknown template '" + name + "'");
    return nlohmann::json::parse(in);
}

std::filesystem::path SandboxManager::template_rootfs(const std::string& name) const {
    if (!std::filesystem::exists(options_.images_dir / "templates" / name / "template.json"))
        if (auto user = user_template(name)) return templates_->store_rootfs(*user);
    {
        // Asking the build tool costs a Python start per create. A definition edited while the
        // server runs takes effect after a restart, or once its old build is pruned.
        std::lock_guard lock(mutex_);
        auto it = rootfs_cache_.find(name);
        if (it != rootfs_cache_.end() && std::filesystem::exists(it->second / "usr"))
            return it->second;
    }
    // The build tool owns the content hash; ask it where the rootfs is.
    std::vector<std::string> argv = {"python3", (options_.images_dir / "build.py").string(),
                                     "--print-path", name};
    auto r = run_process(argv, std::chrono::seconds(30));
    std::string path = r.out;
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    if (auto nl = path.rfind('\n'); nl != std::string::npos) path = path.substr(nl + 1);
    if (r.status.exit_code != 0 || path.empty())
        throw SandboxError(SandboxFault::failed, "template_error",
                           "template '" + name + "': " + r.err);
    if (!std::filesystem::exists(std::filesystem::path(path) / "usr"))
        throw SandboxError(SandboxFault::conflict, "template_not_built",
                           "template '" + name + "' is not built; run: images/build.py " + name,
                           "template");
    std::lock_guard lock(mutex_);
    rootfs_cache_[name] = path;
    return path;
}

void SandboxManager::start_template_service() {
    templates::TemplateService::Options o;
    o.dir = options_.state_dir / "templates";
    // One run dir per state dir: two servers on one host keep their engines apart.
    o.run_dir = options_.templates_run_dir /
                std::to_string(std::hash<std::string>{}(options_.state_dir.string()) % 1000000007);
    // The engine (and every RUN step) runs in a user namespace of its own whose ids are the
    // last slot of --userns-range: no sandbox ever gets them (docs/ARCHITECTURE.md, "Templates
    // users build"). Without it builds are refused: RUN's root would be host root.
    if (auto why = engine_ids_problem(); !why.empty()) {
        o.no_engine_reason = "template builds are off: " + why;
    } else {
        engine_ids_ = host_id_slots_.claim(options_.host_ids.base_of(options_.host_ids.slots - 1));
        o.engine_host_base = engine_ids_.host_base();
    }
    o.max_upload_bytes = options_.max_template_upload_bytes;
    o.registries = options_.template_registries;
    o.engine_disk_mb = options_.template_engine_disk_mb;
    templates::TemplateService::Hooks hooks;
    hooks.is_shipped = [this](const std::string& name) {
        const auto names = shipped_template_names();
        return std::find(names.begin(), names.end(), name) != names.end();
    };
    hooks.shipped_rootfs = [this](const std::string& name) { return template_rootfs(name); };
    hooks.shipped_definition = [this](const std::string& name) {
        return template_definition(name);
    };
    hooks.network = [this](const std::string& id, const network::NetworkPolicy& policy,
                           const std::string& netns) {
        network::SandboxNetwork::Options n;
        n.sandbox_id = id;
        n.policy = policy;
        n.kind = network::SandboxNetwork::Kind::container;
        n.existing_netns = netns;
        return network_->create(std::move(n));
    };
    hooks.in_use = [this](const templates::TemplateRef& ref) { return template_in_use(ref); };
    templates_ = std::make_unique<templates::TemplateService>(std::move(o), std::move(hooks));
}

std::string SandboxManager::engine_ids_problem() const {
    if (::geteuid() != 0)
        return "deskboxd is not root, and RUN steps run in a user namespace whose ids it maps";
    if (!options_.user_namespaces)
        return "deskboxd runs with --userns false, and RUN steps run in a user namespace of their "
               "own (with host root as RUN's root a build would be less confined than a sandbox)";
    if (options_.host_ids.slots < 2)
        return "--userns-range needs at least 2 ranges: its last one is the build engine's";
    if (auto problem = runtime::host_id_range_problem(options_.host_ids); !problem.empty())
        return problem;
    try {
        // The engine's root walks from / to its storage under the state dir.
        runtime::open_the_way_to_sandboxes(options_.state_dir);
    } catch (const std::exception& e) {
        return e.what();
    }
    return {};
}

bool SandboxManager::template_in_use(const templates::TemplateRef& ref) const {
    std::lock_guard lock(mutex_);
    auto uses = [&](const std::shared_ptr<Sandbox>& sandbox) {
        const auto& name = sandbox->config().template_name;
        return name == ref.str() || (ref.tag == "latest" && name == ref.name);
    };
    for (const auto& [id, sandbox] : sandboxes_)
        if (uses(sandbox)) return true;
    for (const auto& [key, ready] : pool_)
        for (const auto& sandbox : ready)
            if (uses(sandbox)) return true;
    return starting_ > 0;  // one starting may be of it: ask again in a moment
}

std::optional<templates::StoredTemplate> SandboxManager::user_template(
    const std::string& name) const {
    if (!templates_) return std::nullopt;
    try {
        return templates_->find(templates::parse_ref(name));
    } catch (const std::invalid_argument&) {
        return std::nullopt;
    }
}

std::vector<std::string> SandboxManager::template_names() const {
    auto names = shipped_template_names();
    if (templates_)
        for (const auto& t : templates_->templates()) names.push_back(t.ref.str());
    return names;
}

std::map<std::string, SandboxManager::TemplateOffer> SandboxManager::template_offers() const {
    std::map<std::string, TemplateOffer> offers;
    {
        std::lock_guard lock(offers_mutex_);
        const auto now = std::chrono::steady_clock::now();
        const std::uint64_t generation = templates_ ? templates_->store().generation() : 0;
        if (offers_at_ == std::chrono::steady_clock::time_point{} ||
            now - offers_at_ > std::chrono::minutes(1) || generation != offers_store_generation_) {
            offers_store_generation_ = generation;
            built_offers_.clear();
            for (const auto& name : template_names()) {
                TemplateOffer offer;
                std::filesystem::path rootfs;
                try {
                    rootfs = template_rootfs(name);
                } catch (const SandboxError&) {
                    continue;  // not built: offered by no runtime
                }
                for (auto* runtime : runtimes_.all()) {
                    try {
                        runtime->check_template(rootfs);
                    } catch (const runtime::RuntimeError&) {
                        continue;
                    }
                    offer.runtimes.emplace_back(runtime->name());
                    if (auto* snapshots = runtime->template_snapshots();
                        snapshots && runtime->name() == pool_runtime_) {
                        offer.template_snapshot =
                            snapshots->has_template_snapshot(options_.state_dir, rootfs);
                        offer.fast_start_runtime = pool_runtime_;
                    }
                }
                if (auto user = user_template(name)) offer.image_id = user->image_id;
                built_offers_[name] = std::move(offer);
            }
            offers_at_ = now;
        }
        offers = built_offers_;
    }
    std::lock_guard lock(mutex_);
    // The offer's pool is the microVM one (fast_start_runtime); a cluster does not yet place
    // creates by container pools.
    for (const auto& [key, ready] : pool_)
        if (auto it = offers.find(key.second); it != offers.end() && key.first == pool_runtime_)
            it->second.pool_ready += ready.size();
    return offers;
}

}  // namespace deskbox::server
