#include "server/templates/template_ref.hpp"

#include <stdexcept>

namespace deskbox::templates {

namespace {

bool lower_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool tag_char(char c) {
    return (c >= 'A' && c <= 'Z') || lower_alnum(c) || c == '_' || c == '.' || c == '-';
}

}  // namespace

std::optional<std::string> name_problem(std::string_view name) {
    if (name.empty()) return "must not be empty";
    if (name.size() > 63) return "longer than 63 characters";
    if (!lower_alnum(name.front())) return "must start with a lowercase letter or a digit";
    for (char c : name)
        if (!lower_alnum(c) && c != '-') return "may hold only lowercase letters, digits and '-'";
    return std::nullopt;
}

std::optional<std::string> tag_problem(std::string_view tag) {
    if (tag.empty()) return "must not be empty";
    if (tag.size() > 128) return "longer than 128 characters";
    if (tag.front() == '.' || tag.front() == '-') return "must not start with '.' or '-'";
    for (char c : tag)
        if (!tag_char(c)) return "may hold only letters, digits, '_', '.' and '-'";
    return std::nullopt;
}

TemplateRef parse_ref(std::string_view text) {
    TemplateRef ref;
    auto colon = text.find(':');
    ref.name = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) ref.tag = std::string(text.substr(colon + 1));
    if (auto problem = name_problem(ref.name))
        throw std::invalid_argument("template name '" + ref.name + "' " + *problem);
    if (auto problem = tag_problem(ref.tag))
        throw std::invalid_argument("template tag '" + ref.tag + "' " + *problem);
    return ref;
}

}  // namespace deskbox::templates
