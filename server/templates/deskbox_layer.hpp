// What deskbox adds to any image so that it meets the runtime contract (docs/ARCHITECTURE.md,
// "What every template's rootfs has"), as a last layer of its own built by the engine: a POSIX
// shell script run as the image's root in a RUN step without network adds the user, the
// folders and /etc/deskbox/template.json, or refuses the image naming what is missing and how
// to add it. It runs inside the build's confinement, so nothing of the image's (symlinks
// included) is ever written through by the host.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/templates/build_types.hpp"

namespace deskbox::templates {

// Labels deskbox puts on its shipped templates when it imports them as deskbox/<name>; images
// built FROM them inherit them, so a build knows the desktop session it stands on.
inline constexpr char kSessionLabel[] = "io.deskbox.session";
inline constexpr char kTemplateLabel[] = "io.deskbox.template";
inline constexpr char kRootfsLabel[] = "io.deskbox.rootfs";
// Where the final layer's RUN step finds the script and template.json (copied in, then removed).
inline constexpr char kLayerMount[] = "/.deskbox-layer";
// The script's exit status when the image cannot meet the contract.
inline constexpr int kContractRefused = 73;

std::string contract_script();
std::string final_dockerfile(const std::string& from_image);

// The parts of an image's configuration a template uses (from `buildah inspect --type image`).
struct ImageConfig {
    std::vector<std::string> env;  // K=V
    std::vector<std::string> cmd, entrypoint;
    std::string working_dir, user;
    std::map<std::string, std::string> labels;
    std::size_t layers = 0;
    std::string id;
};
ImageConfig parse_image_config(const nlohmann::json& inspect);  // throws on a wrong shape

// The template definition (template.json) of a built image: its session (the base's, with the
// start command as its one autostart app), environment and ready condition.
nlohmann::json make_definition(const TemplateRef& ref, const ImageConfig& config,
                               const BuildRequest& request);

// "deskbox-contract: ..." lines of a failed final layer, joined; nullopt if there are none.
std::optional<std::string> contract_refusal(const std::string& log);

// argv joined into one line the agent's --autostart splits back (quotes where needed).
std::string join_command(const std::vector<std::string>& argv);

}  // namespace deskbox::templates
