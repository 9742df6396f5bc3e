// A user template's name and tag ("myapp", "myapp:v2"; the tag is "latest" when omitted), and
// the rules for both. Shipped templates (images/templates/) have names only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace deskbox::templates {

struct TemplateRef {
    std::string name;
    std::string tag = "latest";
    std::string str() const { return name + ":" + tag; }
    bool operator==(const TemplateRef&) const = default;
};

// What is wrong with a name ([a-z0-9] then [a-z0-9-], at most 63) or tag ([A-Za-z0-9_] then
// [A-Za-z0-9_.-], at most 128), or nullopt.
std::optional<std::string> name_problem(std::string_view name);
std::optional<std::string> tag_problem(std::string_view tag);

// "name" or "name:tag"; throws std::invalid_argument saying what is wrong.
TemplateRef parse_ref(std::string_view text);

}  // namespace deskbox::templates
