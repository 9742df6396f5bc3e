// What runs actions on a desktop. The agent holds one: XTestInjector (input/x11/) on a real
// display; code that only dispatches actions is tested with a fake that records them
// (tests/support/fake_injector.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include "input/actions.hpp"

namespace deskbox::input {

class Injector {
  public:
    virtual ~Injector() = default;
    Injector(const Injector&) = delete;
    Injector& operator=(const Injector&) = delete;

    // Runs one action whose coordinates are already in screen pixels. Returns the action's
    // result JSON: {} for most, {"x":..,"y":..} for cursor_position; screenshot and zoom do
    // nothing here (the caller captures the screen). Throws ActionError for an invalid action
    // and std::runtime_error when it cannot be done, after releasing whatever it pressed.
    virtual nlohmann::json execute(const Action& action) = 0;

    // Where the pointer is, in screen pixels.
    virtual Point cursor_position() = 0;

  protected:
    Injector() = default;
};

}  // namespace deskbox::input
