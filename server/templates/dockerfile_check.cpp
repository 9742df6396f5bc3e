#include "server/templates/dockerfile_check.hpp"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

namespace deskbox::templates {

namespace fs = std::filesystem;

namespace {

const std::set<std::string> kInstructions = {
    "ADD",    "ARG",   "CMD",         "COPY",  "ENTRYPOINT", "ENV",
    "EXPOSE", "FROM",  "HEALTHCHECK", "LABEL", "MAINTAINER", "ONBUILD",
    "RUN",    "SHELL", "STOPSIGNAL",  "USER",  "VOLUME",     "WORKDIR"};

std::string upper(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string trim(const std::string& s) {
    auto begin = s.find_first_not_of(" \t\r");
    if (begin == std::string::npos) return "";
    auto end = s.find_last_not_of(" \t\r");
    return s.substr(begin, end - begin + 1);
}

std::vector<std::string> words(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

// Parser directives: "# key=value" lines before anything else; only escape matters here.
char read_escape(const std::vector<std::string>& lines) {
    char escape = '\\';
    for (const auto& raw : lines) {
        auto line = trim(raw);
        if (line.empty() || line[0] != '#') break;
        auto body = trim(line.substr(1));
        auto eq = body.find('=');
        if (eq == std::string::npos) break;
        auto key = lower(trim(body.substr(0, eq)));
        auto value = trim(body.substr(eq + 1));
        if (key == "escape" && (value == "`" || value == "\\")) escape = value[0];
    }
    return escape;
}

// COPY/ADD sources: the arguments without flags, less the destination (JSON form too).
std::vector<std::string> copy_sources(const std::string& arguments, bool& has_from) {
    has_from = false;
    std::vector<std::string> parts;
    auto args = trim(arguments);
    std::vector<std::string> all = words(args);
    std::size_t i = 0;
    for (; i < all.size() && all[i].starts_with("--"); ++i)
        if (all[i].starts_with("--from")) has_from = true;
    if (i < all.size() && all[i].starts_with("[")) {
        // JSON form: ["a", "b", "dest"]; strings without escapes are all this needs.
        std::string rest;
        for (std::size_t k = i; k < all.size(); ++k) rest += all[k] + " ";
        std::string current;
        bool in_string = false;
        for (char c : rest) {
            if (c == '"') {
                if (in_string) parts.push_back(current);
                current.clear();
                in_string = !in_string;
            } else if (in_string) {
                current += c;
            }
        }
    } else {
        parts.assign(all.begin() + static_cast<std::ptrdiff_t>(i), all.end());
    }
    if (!parts.empty()) parts.pop_back();  // the destination
    return parts;
}

}  // namespace

DockerfileReading read_dockerfile(const std::string& text) {
    DockerfileReading reading;
    if (text.find('\0') != std::string::npos) {
        reading.problem = DockerfileProblem{0, "the Dockerfile contains a NUL byte"};
        return reading;
    }
    std::vector<std::string> lines;
    {
        std::istringstream in(text);
        for (std::string l; std::getline(in, l);) lines.push_back(l);
    }
    const char escape = read_escape(lines);
    std::set<std::string> stages;
    bool seen_from = false;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        std::string line = trim(lines[i]);
        if (line.empty() || line[0] == '#') continue;
        DockerfileInstruction instruction;
        instruction.line = i + 1;
        // Continuation: a line ending in the escape character goes on with the next non-comment.
        std::string joined;
        while (true) {
            std::string part = trim(lines[i]);
            bool continues = !part.empty() && part.back() == escape;
            if (continues) part.pop_back();
            joined += part + " ";
            if (!continues) break;
            do {
                ++i;
            } while (i < lines.size() && !trim(lines[i]).empty() && trim(lines[i])[0] == '#');
            if (i >= lines.size()) break;
        }
        auto space = joined.find_first_of(" \t");
        instruction.keyword = upper(joined.substr(0, space));
        instruction.arguments = space == std::string::npos ? "" : trim(joined.substr(space));
        if (!kInstructions.count(instruction.keyword)) {
            reading.problem = DockerfileProblem{
                instruction.line, "unknown instruction '" + joined.substr(0, space) + "'"};
            return reading;
        }
        if (instruction.keyword == "FROM") {
            auto w = words(instruction.arguments);
            std::size_t k = 0;
            while (k < w.size() && w[k].starts_with("--")) ++k;  // --platform=...
            if (k >= w.size()) {
                reading.problem = DockerfileProblem{instruction.line, "FROM names no image"};
                return reading;
            }
            const std::string image = w[k];
            const bool earlier_stage = stages.count(lower(image)) > 0;
            if (!earlier_stage && image.find('$') == std::string::npos && lower(image) != "scratch")
                reading.summary.base_images.emplace_back(instruction.line, image);
            if (k + 2 < w.size() && upper(w[k + 1]) == "AS") stages.insert(lower(w[k + 2]));
            seen_from = true;
        } else if (!seen_from && instruction.keyword != "ARG") {
            reading.problem = DockerfileProblem{
                instruction.line,
                instruction.keyword + " before the first FROM (only ARG may come before it)"};
            return reading;
        }
        if (instruction.arguments.empty() && instruction.keyword != "CMD" &&
            instruction.keyword != "ENTRYPOINT") {
            reading.problem =
                DockerfileProblem{instruction.line, instruction.keyword + " needs arguments"};
            return reading;
        }
        reading.summary.instructions.push_back(std::move(instruction));
    }
    if (!seen_from) reading.problem = DockerfileProblem{0, "the Dockerfile has no FROM"};
    return reading;
}

std::optional<DockerfileProblem> check_copy_sources(const DockerfileSummary& summary,
                                                    const fs::path& context) {
    std::error_code ec;
    const auto root = fs::weakly_canonical(context, ec);
    for (const auto& instruction : summary.instructions) {
        if (instruction.keyword != "COPY" && instruction.keyword != "ADD") continue;
        bool has_from = false;
        for (const auto& source : copy_sources(instruction.arguments, has_from)) {
            if (has_from) break;
            if (source.find("://") != std::string::npos) continue;  // ADD of a URL
            if (source.find_first_of("*?[$") != std::string::npos) continue;
            std::string relative = source;
            while (!relative.empty() && relative.front() == '/') relative.erase(0, 1);
            auto path = fs::weakly_canonical(root / relative, ec);
            auto [end, unused] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
            if (end != root.end())
                return DockerfileProblem{
                    instruction.line,
                    instruction.keyword + " source '" + source + "' is outside the build context"};
            if (!fs::exists(fs::symlink_status(root / relative)))
                return DockerfileProblem{
                    instruction.line,
                    instruction.keyword + " source '" + source + "' is not in the build context"};
        }
    }
    return std::nullopt;
}

}  // namespace deskbox::templates
