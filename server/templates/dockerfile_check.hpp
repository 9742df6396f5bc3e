// A light reading of a Dockerfile before a build is queued, so that the mistakes a person makes
// most often get a 400 naming the line at once instead of a failed build minutes later: an
// unknown instruction, a missing FROM, a COPY source that is not in the context, a base image
// that is not here. It is not an interpreter: buildah reads the file for the build.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace deskbox::templates {

struct DockerfileInstruction {
    std::size_t line = 0;   // 1-based, where the instruction starts
    std::string keyword;    // upper case: FROM, RUN, ...
    std::string arguments;  // continuation lines joined, comments inside removed
};

struct DockerfileProblem {
    std::size_t line = 0;  // 0: the file as a whole
    std::string message;
};

struct DockerfileSummary {
    std::vector<DockerfileInstruction> instructions;
    // FROM images that are neither a stage of this file nor an ARG expression: (line, image).
    std::vector<std::pair<std::size_t, std::string>> base_images;
};

// Splits `text` into instructions, honouring the escape directive, comments and continuation
// lines. The first problem found is returned instead (syntax, unknown instruction, no FROM).
struct DockerfileReading {
    DockerfileSummary summary;
    std::optional<DockerfileProblem> problem;
};
DockerfileReading read_dockerfile(const std::string& text);

// The first COPY/ADD source (without --from, not a URL, without wildcards) that is not in
// `context` (or leaves it), as a problem naming the line; nullopt when all are there.
std::optional<DockerfileProblem> check_copy_sources(const DockerfileSummary& summary,
                                                    const std::filesystem::path& context);

}  // namespace deskbox::templates
