// Images from a registry, the pure parts: which references name a registry, the operator's
// allow-list, the manifest a pull reads first (digest, platform, declared size) and the network
// policy a pull runs under.
#include <gtest/gtest.h>

#include "server/templates/registry.hpp"

using namespace deskbox::templates;
using nlohmann::json;

TEST(Registry, ReferencesNameARegistryOnlyWithAHostFirst) {
    EXPECT_TRUE(names_registry("reg.example/app"));
    EXPECT_TRUE(names_registry("reg:5000/app:1"));
    EXPECT_TRUE(names_registry("198.19.4.2:5000/team/app@sha256:" + std::string(64, 'a')));
    for (const char* local : {"deskbox/minimal", "imported", "debian:12", "localhost/x:latest",
                              "team/app:1", "builder"})
        EXPECT_FALSE(names_registry(local)) << local;

    std::string why;
    auto r = parse_image_reference("Reg.Example:5000/team/app", &why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->registry, "reg.example:5000");
    EXPECT_EQ(r->repository, "team/app");
    EXPECT_EQ(r->str(), "reg.example:5000/team/app:latest");
    const std::string digest = "sha256:" + std::string(64, 'b');
    r = parse_image_reference("reg.example/app:v1.2@" + digest, &why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->tag, "v1.2");
    EXPECT_EQ(r->digest, digest);
    EXPECT_EQ(r->pinned(digest), "reg.example/app@" + digest);

    for (const char* bad :
         {"reg.example/App", "reg.example/app:", "reg.example/app@sha256:12",
          "reg.example:99999/app", "reg.example//app", "-reg.example/app", "reg.example/app:a b"}) {
        why.clear();
        EXPECT_FALSE(parse_image_reference(bad, &why)) << bad;
        EXPECT_FALSE(why.empty()) << bad;
    }
    EXPECT_FALSE(parse_image_reference("debian:12", &why));
    EXPECT_NE(why.find("names no registry"), std::string::npos) << why;
}

TEST(Registry, OnlyRegistriesTheOperatorNamesAreAllowed) {
    RegistryOptions none;
    EXPECT_FALSE(registry_allowed(none, "reg.example"));
    auto refusal = registry_refusal(none, "reg.example");
    EXPECT_NE(refusal.find("'reg.example'"), std::string::npos) << refusal;
    EXPECT_NE(refusal.find("--template-registry"), std::string::npos) << refusal;
    EXPECT_NE(refusal.find("allowed here: none"), std::string::npos) << refusal;

    RegistryOptions some;
    some.allowed = {"reg.example", "Other.example:5000"};
    some.insecure = {"198.19.4.2:5000"};
    EXPECT_TRUE(registry_allowed(some, "reg.example"));
    EXPECT_TRUE(registry_allowed(some, "other.example:5000"));
    EXPECT_FALSE(registry_allowed(some, "reg.example:5000"));  // another port: another registry
    EXPECT_FALSE(registry_allowed(some, "other.example"));
    EXPECT_TRUE(registry_allowed(some, "198.19.4.2:5000"));
    EXPECT_TRUE(registry_insecure(some, "198.19.4.2:5000"));
    EXPECT_FALSE(registry_insecure(some, "reg.example"));

    EXPECT_FALSE(registry_entry_problem("reg.example:5000"));
    EXPECT_FALSE(registry_entry_problem("10.0.0.5"));
    for (const char* bad : {"https://reg.example", "reg.example/team", "reg example", ""})
        EXPECT_TRUE(registry_entry_problem(bad)) << bad;
}

TEST(Registry, TheManifestSaysTheDigestPlatformAndSize) {
    const std::string image =
        R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
        R"("config":{"digest":"sha256:c","size":300},)"
        R"("layers":[{"digest":"sha256:l1","size":1000},{"digest":"sha256:l2","size":2000}]})";
    auto reading = read_manifest(image);
    EXPECT_FALSE(reading.is_index);
    EXPECT_EQ(reading.layers, 2u);
    EXPECT_EQ(reading.layer_bytes, 3300u);
    // The digest of the manifest's exact bytes.
    EXPECT_EQ(sha256_digest(""),
              "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

    const std::string index =
        R"({"schemaVersion":2,"manifests":[)"
        R"({"digest":"sha256:arm","platform":{"os":"linux","architecture":"arm64"}},)"
        R"({"digest":"sha256:amd","platform":{"os":"linux","architecture":"amd64"}}]})";
    reading = read_manifest(index);
    EXPECT_TRUE(reading.is_index);
#if defined(__aarch64__)
    EXPECT_EQ(reading.child, "sha256:arm");
#else
    EXPECT_EQ(reading.child, "sha256:amd");
#endif
    EXPECT_THROW(read_manifest(R"({"schemaVersion":2,"manifests":[]})"), std::runtime_error);
    EXPECT_THROW(read_manifest("not json"), std::runtime_error);
    EXPECT_THROW(read_manifest(R"({"schemaVersion":1,"fsLayers":[]})"), std::runtime_error);
    EXPECT_THROW(read_manifest(R"({"schemaVersion":2,"layers":[{"digest":"sha256:x"}]})"),
                 std::runtime_error);
}

TEST(Registry, APullReachesTheRegistryAndNoPrivateAddressBesides) {
    // A public registry: the internet (a CDN it redirects to is public too), nothing private.
    EXPECT_EQ(pull_network_policy("93.184.216.34:443"), json(true));
    // An operator's registry on a private network: that address only.
    EXPECT_EQ(pull_network_policy("198.19.4.2:5000"), json({{"allow", {"198.19.4.2"}}}));
    EXPECT_EQ(pull_network_policy("10.1.2.3"), json({{"allow", {"10.1.2.3"}}}));
    // The host itself never.
    EXPECT_THROW(pull_network_policy("127.0.0.1:5000"), std::runtime_error);
    EXPECT_THROW(pull_network_policy("169.254.169.254"), std::runtime_error);
    EXPECT_EQ(skopeo_inspect_args("reg.example/app:1", true),
              (std::vector<std::string>{"skopeo", "inspect", "--raw", "--no-creds",
                                        "--tls-verify=false", "docker://reg.example/app:1"}));
}
