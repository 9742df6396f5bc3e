#include "server/cli/build_context.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <system_error>

#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

namespace fs = std::filesystem;

namespace {

// Go's filepath.Clean on '/'-separated text, as Docker cleans a pattern.
std::string clean(std::string_view path) {
    const bool rooted = !path.empty() && path.front() == '/';
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string_view::npos) end = path.size();
        std::string part(path.substr(start, end - start));
        if (part == "..") {
            if (!parts.empty() && parts.back() != "..")
                parts.pop_back();
            else if (!rooted)
                parts.push_back(part);
        } else if (!part.empty() && part != ".") {
            parts.push_back(part);
        }
        start = end + 1;
    }
    std::string out = rooted ? "/" : "";
    for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "/" : "") + parts[i];
    return out.empty() ? "." : out;
}

// The regular expression Docker (moby/patternmatcher) makes of a cleaned pattern.
std::string to_regex(const std::string& pattern) {
    std::string re = "^";
    bool in_class = false;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (in_class) {
            if (c == ']') in_class = false;
            if (c == '\\' && i + 1 < pattern.size()) {
                re += '\\';
                re += pattern[++i];
                continue;
            }
            re += c;
            continue;
        }
        if (c == '*') {
            if (i + 1 < pattern.size() && pattern[i + 1] == '*') {
                ++i;
                if (i + 1 < pattern.size() && pattern[i + 1] == '/') ++i;  // "**/" is "**"
                re += i + 1 == pattern.size() ? ".*" : "(.*/)?";
            } else {
                re += "[^/]*";
            }
        } else if (c == '?') {
            re += "[^/]";
        } else if (c == '\\') {
            if (i + 1 < pattern.size()) {
                const char next = pattern[++i];
                if (std::string_view(".+()|{}$^*?[]\\/").find(next) != std::string_view::npos)
                    re += '\\';
                re += next;
            } else {
                re += "\\\\";
            }
        } else if (c == '[') {
            in_class = true;
            re += c;
        } else if (std::string_view(".+()|{}$^]").find(c) != std::string_view::npos) {
            re += '\\';
            re += c;
        } else {
            re += c;
        }
    }
    return re + "$";
}

}  // namespace

IgnorePatterns IgnorePatterns::parse(std::string_view text) {
    IgnorePatterns out;
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 BOM
    std::size_t line_number = 0;
    while (!text.empty()) {
        ++line_number;
        std::size_t end = text.find('\n');
        std::string line(text.substr(0, end));
        text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
        if (line.starts_with("#")) continue;
        auto trim = [](std::string s) {
            const char* space = " \t\r\v\f";
            auto first = s.find_first_not_of(space);
            if (first == std::string::npos) return std::string();
            return s.substr(first, s.find_last_not_of(space) - first + 1);
        };
        line = trim(line);
        if (line.empty()) continue;
        Pattern pattern;
        if (line.front() == '!') {
            pattern.exception = true;
            line = trim(line.substr(1));
        }
        if (!line.empty()) {
            line = clean(line);
            if (line.size() > 1 && line.front() == '/') line.erase(0, 1);
        }
        try {
            pattern.regex = std::regex(to_regex(line), std::regex::ECMAScript);
        } catch (const std::regex_error&) {
            throw std::runtime_error(".dockerignore line " + std::to_string(line_number) +
                                     ": the pattern '" + line + "' is malformed");
        }
        out.exceptions_ = out.exceptions_ || pattern.exception;
        out.patterns_.push_back(std::move(pattern));
    }
    return out;
}

bool IgnorePatterns::excluded(const std::string& path) const {
    // "a/b/c" is also excluded by a pattern that matches "a" or "a/b".
    std::vector<std::string> parents;
    for (std::size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1))
        parents.push_back(path.substr(0, slash));
    bool matched = false;
    for (const auto& pattern : patterns_) {
        // An exclusion cannot change an excluded path, nor an exception a kept one.
        if (pattern.exception != matched) continue;
        bool match = std::regex_match(path, pattern.regex);
        for (std::size_t i = 0; !match && i < parents.size(); ++i)
            match = std::regex_match(parents[i], pattern.regex);
        if (match) matched = !pattern.exception;
    }
    return matched;
}

ContextListing list_context(const fs::path& dir, const IgnorePatterns& ignore,
                            const std::vector<std::string>& always) {
    ContextListing listing;
    const std::set<std::string> kept(always.begin(), always.end());
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
    if (ec) throw std::runtime_error("cannot read " + dir.string() + ": " + ec.message());
    auto add = [&](const std::string& relative, const fs::file_status& status,
                   const fs::path& path) {
        if (fs::is_regular_file(status)) {
            std::error_code size_ec;
            const auto size = fs::file_size(path, size_ec);
            if (size_ec)
                throw std::runtime_error("cannot read " + path.string() + ": " + size_ec.message());
            ++listing.files;
            listing.bytes += size;
        } else if (!fs::is_directory(status) && !fs::is_symlink(status)) {
            return;  // a socket, FIFO or device: nothing a build can use
        }
        listing.entries.push_back("./" + relative);
    };
    for (; it != end; it.increment(ec)) {
        if (ec) break;
        const std::string relative = it->path().lexically_relative(dir).generic_string();
        const fs::file_status status = it->symlink_status(ec);
        if (ec) break;
        if (!kept.count(relative) && ignore.excluded(relative)) {
            ++listing.excluded;
            // Without exceptions nothing below an excluded directory can be kept.
            if (fs::is_directory(status) && !ignore.has_exceptions())
                it.disable_recursion_pending();
            continue;
        }
        add(relative, status, it->path());
    }
    if (ec) {
        const std::string where = it == end ? dir.string() : it->path().string();
        throw std::runtime_error("cannot read " + where + ": " + ec.message());
    }
    // What Docker always sends, even below an excluded directory.
    for (const auto& relative : kept) {
        const std::string entry = "./" + relative;
        const auto status = fs::symlink_status(dir / relative, ec);
        if (!ec && fs::exists(status) &&
            std::find(listing.entries.begin(), listing.entries.end(), entry) ==
                listing.entries.end())
            add(relative, status, dir / relative);
    }
    std::sort(listing.entries.begin(), listing.entries.end());
    return listing;
}

DockerfileChoice choose_dockerfile(const fs::path& dir, const std::optional<std::string>& file) {
    DockerfileChoice choice;
    const fs::path path = file ? fs::path(*file) : dir / "Dockerfile";
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        throw std::runtime_error(file ? "no Dockerfile at " + *file
                                      : "no Dockerfile in " + dir.string() + " (give -f FILE)");
    const fs::path lexical = fs::absolute(path).lexically_normal().lexically_relative(
        fs::absolute(dir).lexically_normal());
    const fs::path real = fs::canonical(path, ec).lexically_relative(fs::canonical(dir, ec));
    const bool inside = !ec && !lexical.empty() && lexical == real && *lexical.begin() != ".." &&
                        !fs::is_symlink(path);
    if (inside)
        choice.path_in_context = lexical.generic_string();
    else
        choice.text = read_local_file(path.string());
    return choice;
}

}  // namespace deskbox::cli
