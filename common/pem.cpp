#include "common/pem.hpp"

#include <stdexcept>

namespace deskbox {

namespace {

constexpr std::string_view kPemBegin = "-----BEGIN CERTIFICATE-----";
constexpr std::string_view kPemEnd = "-----END CERTIFICATE-----";

std::string_view without_line_end(std::string_view line) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.remove_suffix(1);
    return line;
}

bool is_base64_line(std::string_view line) {
    if (line.empty()) return false;
    for (char c : line)
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '/' || c == '='))
            return false;
    return true;
}

bool is_blank(std::string_view line) {
    return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

std::vector<std::string> pem_certificates(std::string_view text) {
    std::vector<std::string> blocks;
    std::string block;
    bool inside = false;
    std::size_t line_number = 0;
    for (std::size_t start = 0; start < text.size();) {
        const auto newline = text.find('\n', start);
        const auto end = newline == std::string_view::npos ? text.size() : newline;
        const std::string_view line = without_line_end(text.substr(start, end - start));
        start = end + 1;
        ++line_number;
        const std::string where = "line " + std::to_string(line_number);
        if (!inside) {
            if (line == kPemBegin) {
                inside = true;
                block.assign(line).push_back('\n');
            } else if (!is_blank(line)) {
                throw std::invalid_argument(where + ": only PEM certificates may be given");
            }
        } else if (line == kPemEnd) {
            if (block.size() == kPemBegin.size() + 1)
                throw std::invalid_argument(where + ": an empty certificate");
            block.append(line).push_back('\n');
            blocks.push_back(std::move(block));
            block.clear();
            inside = false;
        } else if (!is_base64_line(line)) {
            throw std::invalid_argument(where + ": not base64 inside a PEM certificate");
        } else {
            block.append(line).push_back('\n');
        }
    }
    if (inside) throw std::invalid_argument("a PEM certificate without its END line");
    if (blocks.empty()) throw std::invalid_argument("no PEM certificate");
    return blocks;
}

bool bundle_holds(std::string_view bundle, std::string_view certificate) {
    // A block counts only where a line starts: a bundle never holds one inside another line.
    for (auto at = bundle.find(certificate); at != std::string_view::npos;
         at = bundle.find(certificate, at + 1))
        if (at == 0 || bundle[at - 1] == '\n') return true;
    return false;
}

std::string bundle_with(std::string bundle, const std::vector<std::string>& certificates) {
    for (const auto& certificate : certificates) {
        if (bundle_holds(bundle, certificate)) continue;
        if (!bundle.empty() && bundle.back() != '\n') bundle.push_back('\n');
        bundle += certificate;
    }
    return bundle;
}

}  // namespace deskbox
