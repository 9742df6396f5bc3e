// Images from a registry (FROM reg.example:5000/team/app:1, an import by reference): which
// references name a registry at all, which registries the operator allows (--template-registry;
// none by default), and what a pull reads from a registry before it pulls (the manifest: the
// digest the template is pinned to, the layers' declared size). Pure functions: the pull itself
// is template_build_steps.cpp's. Why an allow-list and what is checked: docs/ARCHITECTURE.md,
// "Images from a registry".
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deskbox::templates {

// "registry/repository[:tag][@sha256:digest]" with the registry named (a host with a '.' or a
// ':port'; "localhost" is the engine's own storage, not a registry).
struct ImageReference {
    std::string registry;    // host[:port], lower case
    std::string repository;  // team/app
    std::string tag;         // empty when only a digest is given
    std::string digest;      // "sha256:<64 hex>" or empty

    // As written (normalized): registry/repository[:tag][@digest]; without tag or digest the
    // tag "latest".
    std::string str() const;
    // registry/repository@digest: what the pull fetches once the digest is known.
    std::string pinned(const std::string& digest) const;
};

// Whether `text` names an image in a registry (its first part is a host with a '.' or a port).
bool names_registry(std::string_view text);
// Parses a reference that names a registry; nullopt with `why` set when it is not one or is
// malformed.
std::optional<ImageReference> parse_image_reference(std::string_view text, std::string* why);

struct RegistryOptions {
    // host[:port] entries (--template-registry); an entry without a port allows the registry
    // written without one. Empty: no registry is reached.
    std::vector<std::string> allowed;
    // Registries reached over plain HTTP, or HTTPS without verifying the certificate
    // (--template-registry-insecure, for test and lab registries); each is also allowed.
    std::vector<std::string> insecure;
    std::chrono::seconds pull_timeout{600};
    std::uint64_t max_pull_bytes = 8ull << 30;  // the layers' declared size, compressed
    // How long a pulled image no template stands on stays as a cache (--template-pull-keep-h).
    std::chrono::hours keep_unused{24};
};

bool registry_allowed(const RegistryOptions& options, const std::string& registry);
bool registry_insecure(const RegistryOptions& options, const std::string& registry);
// Why `registry` is refused, naming the flag (for a 400).
std::string registry_refusal(const RegistryOptions& options, const std::string& registry);
// A --template-registry value's problem, or nullopt (host[:port], no scheme, no path).
std::optional<std::string> registry_entry_problem(std::string_view entry);

// What a manifest says (as `skopeo inspect --raw` gives it, bytes unchanged).
struct ManifestReading {
    bool is_index = false;  // a manifest list / OCI index: `child` is linux/amd64's digest
    std::string child;
    std::uint64_t layer_bytes = 0;  // an image manifest: its config and layers' sizes
    std::size_t layers = 0;
};
// Throws std::runtime_error saying what is wrong (not JSON, no amd64 image, a size missing).
ManifestReading read_manifest(const std::string& raw);
// "sha256:<hex>" of `bytes`: a manifest's digest is that of its exact bytes.
std::string sha256_digest(std::string_view bytes);

// The network policy a pull from `registry` runs under (NetworkPolicy::parse's form): the
// internet when every address the host resolves to is public, else exactly the registry's name
// and addresses (an operator's registry on a private network). Either way the host, deskboxd,
// loopback and link-local are never reached, nor any other private address, so a redirect
// cannot lead the pull there. Throws std::runtime_error when the name does not resolve or
// resolves to loopback or link-local (a registry on the host itself cannot be reached).
nlohmann::json pull_network_policy(const std::string& registry);

// `skopeo inspect --raw` of `image` (a docker:// reference without the scheme).
std::vector<std::string> skopeo_inspect_args(const std::string& image, bool insecure);

}  // namespace deskbox::templates
