#include "input/scaling.hpp"

#include <cstdint>
#include <stdexcept>

namespace deskbox::input {

namespace {

std::string size_text(Size size) {
    return std::to_string(size.width) + "x" + std::to_string(size.height);
}

std::string join_field(const std::string& prefix, const std::string& name) {
    return prefix.empty() ? name : prefix + "." + name;
}

// Maps 0..from-1 onto 0..to-1 so that both ends land exactly on both ends:
// round(v * (to-1) / (from-1)), rounding halves up, in 64-bit integers (no float drift).
// A one-pixel-wide source has a single point, 0, which maps to 0.
int scale_axis(int value, int from, int to) {
    if (from == 1) return 0;
    const std::int64_t numerator = std::int64_t{value} * (to - 1);
    const std::int64_t denominator = from - 1;
    return static_cast<int>((2 * numerator + denominator) / (2 * denominator));
}

// `bounds` is the screen the coordinate is meant for: the API size the agent was told, or the real
// one.
void check_axis(int value, int length, Size bounds, const char* axis, const std::string& field) {
    if (value < 0 || value >= length) {
        throw ActionError(field, std::string(axis) + "=" + std::to_string(value) +
                                     " is outside the " + size_text(bounds) + " screen (" + axis +
                                     " must be 0.." + std::to_string(length - 1) + ")");
    }
}

}  // namespace

CoordinateScaler::CoordinateScaler(Size api, Size screen) : api_(api), screen_(screen) {
    if (api.width <= 0 || api.height <= 0) {
        throw std::invalid_argument("API size must be positive, got " + size_text(api));
    }
    if (screen.width <= 0 || screen.height <= 0) {
        throw std::invalid_argument("screen size must be positive, got " + size_text(screen));
    }
}

Point CoordinateScaler::to_screen(Point p, const std::string& field) const {
    check_axis(p.x, api_.width, api_, "x", field);
    check_axis(p.y, api_.height, api_, "y", field);
    return {scale_axis(p.x, api_.width, screen_.width),
            scale_axis(p.y, api_.height, screen_.height)};
}

Point CoordinateScaler::to_api(Point p, const std::string& field) const {
    check_axis(p.x, screen_.width, screen_, "x", field);
    check_axis(p.y, screen_.height, screen_, "y", field);
    return {scale_axis(p.x, screen_.width, api_.width),
            scale_axis(p.y, screen_.height, api_.height)};
}

Point CoordinateScaler::to_api_unchecked(Point p) const {
    return {scale_axis(p.x, screen_.width, api_.width),
            scale_axis(p.y, screen_.height, api_.height)};
}

Action CoordinateScaler::to_screen(const Action& action, const std::string& field_prefix,
                                   Dialect dialect) const {
    Action scaled = action;
    for_each_point(scaled, [&](Point& point, std::size_t index) {
        // Each axis is checked on its own so the error names exactly the field that was wrong.
        check_axis(point.x, api_.width, api_, "x",
                   join_field(field_prefix, coordinate_field(action, index, 0, dialect)));
        check_axis(point.y, api_.height, api_, "y",
                   join_field(field_prefix, coordinate_field(action, index, 1, dialect)));
        point = {scale_axis(point.x, api_.width, screen_.width),
                 scale_axis(point.y, api_.height, screen_.height)};
    });
    return scaled;
}

}  // namespace deskbox::input
