// The names users give what outlives a sandbox (volumes, snapshots): safe as one path component
// and in a URL, and the same rule everywhere.
#pragma once

#include <string>

namespace deskbox {

// Why `name` is not [a-z0-9][a-z0-9_.-]{0,62}, or "" if it is.
inline std::string resource_name_problem(const std::string& name) {
    if (name.empty() || name.size() > 63) return "must be 1 to 63 characters";
    if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
        return "must start with a lowercase letter or a digit";
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return "may hold only lowercase letters, digits, '_', '.' and '-'";
    return "";
}

}  // namespace deskbox
