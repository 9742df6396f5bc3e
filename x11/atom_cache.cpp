#include "x11/atom_cache.hpp"

namespace deskbox::x11 {

std::vector<Atom> AtomCache::intern(const std::vector<std::string>& names) {
    std::lock_guard lock(mutex_);
    std::vector<Atom> atoms(names.size(), None);
    std::vector<char*> missing;
    std::vector<std::size_t> missing_at;
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (auto it = atoms_.find(names[i]); it != atoms_.end()) {
            atoms[i] = it->second;
        } else {
            missing.push_back(const_cast<char*>(names[i].c_str()));
            missing_at.push_back(i);
        }
    }
    if (missing.empty()) return atoms;
    std::vector<Atom> answered(missing.size(), None);
    XInternAtoms(display_, missing.data(), static_cast<int>(missing.size()), False,
                 answered.data());
    for (std::size_t j = 0; j < missing.size(); ++j) {
        atoms[missing_at[j]] = answered[j];
        if (answered[j] != None) atoms_.emplace(names[missing_at[j]], answered[j]);
    }
    return atoms;
}

}  // namespace deskbox::x11
