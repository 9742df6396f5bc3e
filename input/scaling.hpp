// Coordinate scaling between the resolution an agent was told (API resolution) and the real screen.
// Endpoints map to endpoints exactly: api 0 -> screen 0 and api (w-1) -> screen (w-1), both ways.
#pragma once

#include <string>

#include "input/actions.hpp"

namespace deskbox::input {

class CoordinateScaler {
  public:
    // Throws std::invalid_argument for non-positive sizes.
    CoordinateScaler(Size api, Size screen);

    Size api() const { return api_; }
    Size screen() const { return screen_; }
    bool identity() const { return api_ == screen_; }

    // Throws ActionError{field, "outside the WxH screen"} if `p` is not on the API screen.
    Point to_screen(Point p, const std::string& field = "coordinate") const;
    // Throws ActionError if `p` is not on the real screen.
    Point to_api(Point p, const std::string& field = "coordinate") const;
    // A point that may lie past the screen's edges (a window's corner) in API pixels: mapped as
    // to_api maps points on it, unchecked.
    Point to_api_unchecked(Point p) const;

    // Every coordinate in the action mapped to the screen (validating against the API size).
    // Errors name the coordinate as `dialect` wrote it (see coordinate_field).
    Action to_screen(const Action& action, const std::string& field_prefix = "",
                     Dialect dialect = Dialect::native) const;

  private:
    Size api_;
    Size screen_;
};

}  // namespace deskbox::input
