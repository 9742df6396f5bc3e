#include "server/runtime/runtime_registry.hpp"

#include <stdexcept>

namespace deskbox::runtime {

void RuntimeRegistry::add(std::unique_ptr<Runtime> runtime) {
    if (!runtime) throw std::invalid_argument("no runtime to register");
    if (find(runtime->name()))
        throw std::invalid_argument(std::string("a runtime named '") + runtime->name() +
                                    "' is registered already");
    runtimes_.push_back(std::move(runtime));
}

Runtime* RuntimeRegistry::find(const std::string& name) const {
    for (const auto& runtime : runtimes_)
        if (name == runtime->name()) return runtime.get();
    return nullptr;
}

std::vector<Runtime*> RuntimeRegistry::all() const {
    std::vector<Runtime*> out;
    for (const auto& runtime : runtimes_) out.push_back(runtime.get());
    return out;
}

std::string RuntimeRegistry::names() const {
    std::string out;
    for (const auto& runtime : runtimes_)
        out += (out.empty() ? "" : ", ") + std::string(runtime->name());
    return out;
}

}  // namespace deskbox::runtime
