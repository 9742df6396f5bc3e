// Executes actions on an X display with XTest. Each call returns after the X server has
// processed the events (XSync). Modifiers and buttons it pressed are released even on failure.
#pragma once

#include <X11/Xlib.h>

#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"

namespace deskbox::input {

class XTestInjector {
public:
    // Does not take ownership of `display`. Throws std::runtime_error if XTest is missing.
    explicit XTestInjector(Display* display);
    ~XTestInjector();
    XTestInjector(const XTestInjector&) = delete;
    XTestInjector& operator=(const XTestInjector&) = delete;

    // Runs one action (coordinates already in screen pixels and validated). Returns the
    // action's result JSON: {} for most, {"x":..,"y":..} for cursor_position.
    // Throws ActionError / std::runtime_error on failure (after releasing what it pressed).
    nlohmann::json execute(const Action& action);

    Point cursor_position();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::input
