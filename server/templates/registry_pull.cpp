// Registry images into the engine's storage: each pull runs from deskboxd's side (not in a RUN
// step), as the engine's root, in a network of its own under deskbox's policy for the registry
// (registry.hpp, pull_network_policy), after the manifest says its digest and size. A digest
// already in the storage is not fetched again, so bases are reused across builds.
#include <algorithm>

#include "common/atomic_file.hpp"
#include "common/utf8.hpp"
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

}  // namespace

std::string TemplateService::resolve_digest(Job& j, const ImageReference& image) {
    const bool insecure = registry_insecure(options_.registries, image.registry);
    const auto timeout =
        std::min<std::chrono::seconds>(options_.registries.pull_timeout, std::chrono::seconds(120));
    auto fetch = [&](const std::string& name) {
        auto r = run_process(engine_tool_spawn(skopeo_inspect_args(name, insecure), &j), timeout);
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

std::string TemplateService::pull_image(Job& j, const ImageReference& image) {
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
    const std::string digest = resolve_digest(j, image);
    const std::string pinned = image.pinned(digest);
    auto here = run_process(engine_spawn({"inspect", "--type", "image", pinned}, &j),
                            std::chrono::seconds(30));
    if (here.status.exit_code == 0) {
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
    // Named as the Dockerfile writes it, so FROM finds it with --pull=never.
    if (image.digest.empty()) engine_output(j, {"tag", pinned, image.str()});
    if (std::find(j.pulled.begin(), j.pulled.end(), pinned) == j.pulled.end())
        j.pulled.push_back(pinned);
    if (auto base = parse_image_reference(j.base, nullptr);
        j.base_digest.empty() && base && base->str() == image.str())
        j.base_digest = pinned;
    return pinned;
}

void TemplateService::import_reference(Job& j) {
    const std::string pinned = pull_image(j, j.pulls.front());
    const std::string image = "localhost/" + j.info.ref.str();
    engine_output(j, {"tag", pinned, image});
    add_deskbox_layer(j, image);
}

}  // namespace deskbox::templates
