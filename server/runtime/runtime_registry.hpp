// The runtimes a server offers, by the name a create request gives them ("container",
// "microvm"). deskboxd registers the real ones (server/daemon/server_config.cpp); tests and
// the HTTP fuzzer register a FakeRuntime, so the sandbox manager never builds one itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

class RuntimeRegistry {
  public:
    // Registers `runtime` under its name(). Throws std::invalid_argument for a second runtime
    // of the same name.
    void add(std::unique_ptr<Runtime> runtime);
    Runtime* find(const std::string& name) const;  // nullptr if there is none by that name
    std::vector<Runtime*> all() const;             // in the order they were added
    std::string names() const;                     // "container, microvm"

  private:
    std::vector<std::unique_ptr<Runtime>> runtimes_;
};

}  // namespace deskbox::runtime
