// The services' X connections: opened lazily, and again after the X server was restarted
// (the session supervisor restarts a dead Xvfb); a display that cannot be reached is the
// service error `unavailable`.
#pragma once

#include <memory>
#include <string>

#include "guest-desktop/services/service_error.hpp"
#include "x11/connection.hpp"

namespace deskbox::services {

// A new connection to `display_name`; throws ServiceError(unavailable) if there is none.
inline std::unique_ptr<x11::XConnection> open_display(const std::string& display_name) {
    try {
        return std::make_unique<x11::XConnection>(display_name);
    } catch (const x11::XConnectionError& e) {
        throw ServiceError(error_code::unavailable, e.what());
    }
}

// The connection in `slot`, replaced first if it is missing or broken.
inline x11::XConnection& live_display(std::unique_ptr<x11::XConnection>& slot,
                                      const std::string& display_name) {
    if (slot && slot->broken()) slot.reset();
    if (!slot) slot = open_display(display_name);
    return *slot;
}

}  // namespace deskbox::services
