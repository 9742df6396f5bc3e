// Registry images into the engine's storage: each pull runs from deskboxd's side (not in a RUN
// step), as the engine's root, in a network of its own under deskbox's policy for the registry
// (registry.hpp, pull_network_policy), after the manifest says its digest and size. A digest
// already in the storage is not fetched again, so bases are reused across builds.
#include <algorithm>
#include <set>

#include "common/atomic_file.hpp"
#include "common/utf8.hpp"
#include "server/templates/pulled_images.hpp"
#include "server/templates/template_jobs.hpp"

namespace deskbox::templates {

using Clock = std::chrono::steady_clock;

namespace {

std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return utf8::to_valid(s.size() > 600 ? s.substr(s.size() - 600) : s);
}

BuildFailure pull_failure(const std::string& message) {
    return BuildFailure{"pull_failed", message, 0, "", std::nullopt, ""};
}

// Whether skopeo's error says the registry did not answer (down, unreachable, overloaded), as
// against an answer that refuses (unknown tag, denied): only the first may fall back to a copy
// pulled before. The tool's text is the only signal it gives.
bool says_unreachable(const std::string& error) {
    for (const char* sign :
         {"connection refused", "no route to host", "network is unreachable", "i/o timeout",
          "no such host", "connection reset", "TLS handshake timeout", "server misbehaving",
          "context deadline exceeded", "unexpected HTTP status: 5", "EOF"})
        if (error.find(sign) != std::string::npos) return true;
    return false;
}

}  // namespace

std::string TemplateService::resolve_digest(Job& j, const ImageReference& image) {
    const bool insecure = registry_insecure(options_.registries, image.registry);
    const auto timeout =
        std::min<std::chrono::seconds>(options_.registries.pull_timeout, std::chrono::seconds(120));
    auto fetch = [&](const std::string& name) {
        auto r = run_process(engine_tool_spawn(skopeo_inspect_args(name, insecure), &j), timeout);
        j.registry_unreachable =
            r.status.exit_code != 0 && (r.timed_out || says_unreachable(r.err));
        if (r.status.exit_code != 0)
            throw StepFailed(pull_failure(
                "cannot read " + name + " from registry " + image.registry + ": " +
                (r.timed_out ? "no answer within " + std::to_string(timeout.count()) + " s"
                             : trimmed(r.err))));
        return r.out;
    };
    // A tag and a digest together: the digest decides (the engine takes no name with both).
    const std::string raw = fetch(image.digest.empty() ? image.str() : image.pinned(image.digest));
    const std::string digest = sha256_digest(raw);
    if (!image.digest.empty() && digest != image.digest)
        throw StepFailed(pull_failure("registry " + image.registry + " answered " + image.str() +
                                      " with a manifest of digest " + digest));
    try {
        auto reading = read_manifest(raw);
        if (reading.is_index) {
            const std::string child = fetch(image.pinned(reading.child));
            if (sha256_digest(child) != reading.child)
                throw std::runtime_error("the platform's manifest does not match its digest");
            reading = read_manifest(child);
        }
        const auto limit = options_.registries.max_pull_bytes;
        if (reading.layer_bytes > limit)
            throw std::runtime_error(
                "its layers are " + std::to_string(reading.layer_bytes >> 20) +
                " MiB as the registry stores them, over this server's pull limit of " +
                std::to_string(limit >> 20) + " MiB (--template-pull-max-mb)");
        log_line(j, "deskbox: " + image.str() + " is " + digest + " (" +
                        std::to_string(reading.layers) + " layers, " +
                        std::to_string(reading.layer_bytes >> 20) + " MiB)");
    } catch (const StepFailed&) {
        throw;
    } catch (const std::runtime_error& e) {
        throw StepFailed(pull_failure("cannot pull " + image.str() + ": " + e.what()));
    }
    return digest;
}

bool TemplateService::image_here(Job& j, const std::string& image) {
    return run_process(engine_spawn({"inspect", "--type", "image", image}, &j),
                       std::chrono::seconds(30))
               .status.exit_code == 0;
}

std::string TemplateService::pull_image(Job& j, const ImageReference& image) {
    if (!image.digest.empty() && image_here(j, image.pinned(image.digest))) {
        const std::string pinned = image.pinned(image.digest);
        log_line(j, "deskbox: " + pinned +
                        " is already here (pulled before; the registry is "
                        "not asked)");
        return use_pulled(j, image, pinned);
    }
    log_line(j, "deskbox: pulling " + image.str() + " (registry " + image.registry + ")");
    // Its own network: the registry as the policy says, never the host or a private address
    // it was not named by (a redirect cannot lead there).
    struct PullNetwork {
        Job& j;
        ~PullNetwork() {
            std::error_code ec;
            if (!j.engine_resolv_conf.empty()) std::filesystem::remove(j.engine_resolv_conf, ec);
            j.engine_resolv_conf.clear();
            j.engine_netns.clear();
            j.network.reset();
            j.netns = {};
        }
    } pull_network{j};
    try {
        const auto policy = network::NetworkPolicy::parse(pull_network_policy(image.registry));
        j.netns = engine_ns_->new_network_namespace();
        j.network = hooks_.network(j.info.id + "-pull", policy, j.netns.ns_path("net"));
        j.engine_netns = j.netns.ns_path("net");
        if (j.network && !j.network->resolv_conf().empty()) {
            j.engine_resolv_conf = engine().tmp / ("resolv-" + j.info.id + ".conf");
            atomic_file::write(j.engine_resolv_conf, j.network->resolv_conf(), {0644});
        }
    } catch (const std::exception& e) {
        throw StepFailed(pull_failure("cannot pull " + image.str() + ": " + e.what()));
    }
    std::string digest;
    try {
        digest = resolve_digest(j, image);
    } catch (const StepFailed&) {
        std::optional<std::string> cached;
        if (j.registry_unreachable) {
            std::lock_guard lock(pulls_mutex_);
            cached = PulledImages(engine_disk_ / "pulls.json").pinned_for(image.str());
        }
        if (!cached || !image_here(j, *cached)) throw;
        log_line(j, "deskbox: registry " + image.registry + " cannot be reached; using " + *cached +
                        ", pulled at " + image.str() + " before");
        return use_pulled(j, image, *cached);
    }
    const std::string pinned = image.pinned(digest);
    if (image_here(j, pinned)) {
        log_line(j, "deskbox: " + pinned + " is already here (pulled before)");
    } else {
        std::vector<std::string> args = {"pull", "--policy", "always", "--retry", "1"};
        if (registry_insecure(options_.registries, image.registry))
            args.push_back("--tls-verify=false");
        args.push_back("docker://" + pinned);
        // Its own timeout within the build's.
        const auto build_deadline = j.deadline;
        const auto pull_deadline = Clock::now() + options_.registries.pull_timeout;
        j.deadline = std::min(build_deadline, pull_deadline);
        auto result = run_engine(j, args);
        j.deadline = build_deadline;
        if (result.cancelled)
            throw StepFailed(BuildFailure{"cancelled", "cancelled", 0, "", std::nullopt, ""});
        if (result.timed_out && pull_deadline <= build_deadline)
            throw StepFailed(pull_failure("pulling " + image.str() +
                                          " ran past the pull timeout of " +
                                          std::to_string(options_.registries.pull_timeout.count()) +
                                          " s (--template-pull-timeout-s)"));
        if (result.timed_out)
            throw StepFailed(
                BuildFailure{"timeout", "the build ran past its timeout", 0, "", std::nullopt, ""});
        if (result.status.exit_code != 0)
            throw StepFailed(pull_failure("the engine could not pull " + pinned +
                                          " from registry " + image.registry +
                                          " (the log says why)"));
    }
    return use_pulled(j, image, pinned);
}

std::string TemplateService::use_pulled(Job& j, const ImageReference& image,
                                        const std::string& pinned) {
    // Named as the Dockerfile writes it, so FROM finds it with --pull=never.
    if (image.digest.empty()) engine_output(j, {"tag", pinned, image.str()});
    if (std::find(j.pulled.begin(), j.pulled.end(), pinned) == j.pulled.end())
        j.pulled.push_back(pinned);
    if (auto base = parse_image_reference(j.base, nullptr);
        j.base_digest.empty() && base && base->str() == image.str())
        j.base_digest = pinned;
    std::lock_guard lock(pulls_mutex_);
    PulledImages(engine_disk_ / "pulls.json")
        .used(image.digest.empty() ? image.str() : "", pinned, std::chrono::system_clock::now());
    return pinned;
}

void TemplateService::collect_pulls() {
    if (!engine_ns_ || !engine_disk_mounted()) return;
    std::set<std::string> keep;
    for (const auto& stored : store_.list())
        keep.insert(stored.pulled.begin(), stored.pulled.end());
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, job] : jobs_)
            if (!job->info.finished()) keep.insert(job->pulled.begin(), job->pulled.end());
    }
    std::vector<std::string> unused;
    {
        std::lock_guard lock(pulls_mutex_);
        unused = PulledImages(engine_disk_ / "pulls.json")
                     .take_unused(
                         keep, std::chrono::system_clock::now() - options_.registries.keep_unused);
    }
    for (const auto& pinned : unused) {
        // By id, so every name the image has (the pinned one, the tag) goes with it.
        auto id = run_process(
            engine_spawn({"inspect", "--type", "image", "--format", "{{.FromImageID}}", pinned}),
            std::chrono::seconds(30));
        std::string image_id = id.out.substr(0, id.out.find('\n'));
        if (id.status.exit_code == 0 && !image_id.empty())
            run_process(engine_spawn({"rmi", "--force", image_id}), std::chrono::seconds(60));
    }
}

void TemplateService::import_reference(Job& j) {
    const std::string pinned = pull_image(j, j.pulls.front());
    const std::string image = "localhost/" + j.info.ref.str();
    engine_output(j, {"tag", pinned, image});
    add_deskbox_layer(j, image);
}

}  // namespace deskbox::templates
