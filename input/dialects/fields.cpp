#include "input/dialects/fields.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "common/utf8.hpp"
#include "input/keynames.hpp"

namespace deskbox::input::dialects {

namespace {

constexpr long long kMaxCoordinate = 32767;
// Keys held around one click or scroll.
constexpr std::size_t kMaxHeldKeys = 16;

std::string format_codepoint(char32_t cp) {
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "U+%04X", static_cast<unsigned>(cp));
    return buffer;
}

Keysym read_key_name(const json& value, const std::string& field, KeyCase key_case) {
    std::string name = read_string(value, field);
    if (key_case == KeyCase::openai && name.size() == 1 && name[0] >= 'A' && name[0] <= 'Z') {
        name[0] = static_cast<char>(name[0] - 'A' + 'a');
    }
    const auto keysym = keysym_from_name(name);
    if (!keysym) {
        std::string reason = "unknown key " + quote_for_error(name);
        if (name.size() > 1 && name.find('+') != std::string::npos) {
            reason += " (one key per element, e.g. [\"CTRL\", \"C\"])";
        }
        throw ActionError(field, reason);
    }
    return *keysym;
}

void check_path_size(const json& path, const std::string& field, std::size_t min_points) {
    if (path.size() < min_points) {
        throw ActionError(field, "needs at least " + std::to_string(min_points) + " point" +
                                     (min_points == 1 ? "" : "s") + ", got " +
                                     std::to_string(path.size()));
    }
    if (path.size() > kMaxDragPoints) {
        throw ActionError(field, "has " + std::to_string(path.size()) + " points; at most " +
                                     std::to_string(kMaxDragPoints) + " allowed");
    }
}

}  // namespace

std::string join(const std::string& prefix, std::string_view name) {
    return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

std::string indexed(const std::string& field, std::size_t index) {
    return field + "[" + std::to_string(index) + "]";
}

std::string got(const json& value) {
    return std::string("got ") + value.type_name();
}

std::string join_names(const std::vector<std::string_view>& names) {
    std::string out;
    for (const auto& name : names) {
        if (!out.empty()) out += ", ";
        out += name;
    }
    return out;
}

// ---- value readers ----

long long read_integer(const json& value, const std::string& field, long long min, long long max) {
    long long result = 0;
    if (value.is_number_unsigned()) {
        const auto unsigned_value = value.get<std::uint64_t>();
        result = unsigned_value > static_cast<std::uint64_t>(std::numeric_limits<long long>::max())
                     ? std::numeric_limits<long long>::max()
                     : static_cast<long long>(unsigned_value);
    } else if (value.is_number_integer()) {
        result = value.get<std::int64_t>();
    } else if (value.is_number_float()) {
        const double d = value.get<double>();
        if (!std::isfinite(d) || std::trunc(d) != d) {
            throw ActionError(field, "expected an integer, got " + value.dump());
        }
        if (d < static_cast<double>(min) || d > static_cast<double>(max)) {
            throw ActionError(field, "must be between " + std::to_string(min) + " and " +
                                         std::to_string(max) + ", got " + value.dump());
        }
        result = static_cast<long long>(d);
    } else {
        throw ActionError(field, "expected an integer, " + got(value));
    }
    if (result < min || result > max) {
        throw ActionError(field, "must be between " + std::to_string(min) + " and " +
                                     std::to_string(max) + ", got " + value.dump());
    }
    return result;
}

int read_coordinate(const json& value, const std::string& field) {
    return static_cast<int>(read_integer(value, field, 0, kMaxCoordinate));
}

const std::string& read_string(const json& value, const std::string& field) {
    if (!value.is_string()) throw ActionError(field, "expected a string, " + got(value));
    return value.get_ref<const std::string&>();
}

const json& read_array(const json& value, const std::string& field) {
    if (!value.is_array()) throw ActionError(field, "expected an array, " + got(value));
    return value;
}

std::string read_typed_text(const json& value, const std::string& field) {
    const std::string& text = read_string(value, field);
    if (text.size() > kMaxTextBytes) {
        throw ActionError(field, "is " + std::to_string(text.size()) + " bytes; at most " +
                                     std::to_string(kMaxTextBytes) + " allowed");
    }
    std::size_t bad_offset = 0;
    const auto codepoints = utf8::code_points(text, &bad_offset);
    if (!codepoints) {
        throw ActionError(
            field, "is not valid UTF-8 (bad byte at offset " + std::to_string(bad_offset) + ")");
    }
    std::size_t offset = 0;
    for (char32_t cp : *codepoints) {
        const bool control = cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
        if (control && cp != U'\n' && cp != U'\t') {
            throw ActionError(field, "contains control character " + format_codepoint(cp) +
                                         " at byte " + std::to_string(offset) +
                                         "; only \\n and \\t can be typed");
        }
        offset += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    }
    return text;
}

const std::string& read_key_string(const json& value, const std::string& field) {
    const std::string& text = read_string(value, field);
    if (text.size() > kMaxTextBytes) {
        throw ActionError(field, "is " + std::to_string(text.size()) + " bytes; at most " +
                                     std::to_string(kMaxTextBytes) + " allowed");
    }
    return text;
}

std::vector<Keysym> read_key_list(const json& value, const std::string& field, KeyCase key_case) {
    read_array(value, field);
    if (value.size() > kMaxHeldKeys) {
        throw ActionError(field, "has " + std::to_string(value.size()) + " keys; at most " +
                                     std::to_string(kMaxHeldKeys) + " allowed");
    }
    std::vector<Keysym> keys;
    for (std::size_t i = 0; i < value.size(); ++i) {
        const Keysym keysym = read_key_name(value[i], indexed(field, i), key_case);
        if (std::find(keys.begin(), keys.end(), keysym) != keys.end()) {
            throw ActionError(
                indexed(field, i),
                "key " + quote_for_error(value[i].get<std::string>()) + " is already in the list");
        }
        keys.push_back(keysym);
    }
    return keys;
}

Point read_pair(const json& value, const std::string& field) {
    if (!value.is_array()) throw ActionError(field, "expected an array [x, y], " + got(value));
    if (value.size() != 2) {
        throw ActionError(
            field, "expected 2 numbers [x, y], got " + std::to_string(value.size()) + " elements");
    }
    return {read_coordinate(value[0], indexed(field, 0)),
            read_coordinate(value[1], indexed(field, 1))};
}

Zoom read_region(const json& value, const std::string& field) {
    const json& region = read_array(value, field);
    if (region.size() != 4)
        throw ActionError(
            field, "expected [x0, y0, x1, y1], got " + std::to_string(region.size()) + " numbers");
    int c[4];
    for (std::size_t i = 0; i < 4; ++i) c[i] = read_coordinate(region[i], indexed(field, i));
    if (c[2] < c[0])
        throw ActionError(indexed(field, 2),
                          "x1=" + std::to_string(c[2]) + " is left of x0=" + std::to_string(c[0]));
    if (c[3] < c[1])
        throw ActionError(indexed(field, 3),
                          "y1=" + std::to_string(c[3]) + " is above y0=" + std::to_string(c[1]));
    return Zoom{{c[0], c[1]}, {c[2], c[3]}};
}

int seconds_to_ms(const json& value, const std::string& field, int max_ms) {
    if (!value.is_number()) throw ActionError(field, "expected a number of seconds, " + got(value));
    const double seconds = value.get<double>();
    const double max_seconds = max_ms / 1000.0;
    if (!std::isfinite(seconds) || seconds < 0 || seconds > max_seconds) {
        const std::string limit =
            max_ms % 1000 == 0 ? std::to_string(max_ms / 1000) : json(max_seconds).dump();
        throw ActionError(field,
                          "must be between 0 and " + limit + " seconds, got " + value.dump());
    }
    return static_cast<int>(std::llround(seconds * 1000));
}

// ---- shared by the dialects ----

std::vector<KeyChord> read_key_sequence(const Fields& f, const char* name) {
    const std::string field = f.field(name);
    return parse_key_sequence(read_key_string(f.required(name), field), field);
}

KeyChord read_chord(const Fields& f, const char* name) {
    const std::string field = f.field(name);
    return parse_chord(read_key_string(f.required(name), field), field);
}

Point read_required_xy(const Fields& f) {
    return {read_coordinate(f.required("x"), f.field("x")),
            read_coordinate(f.required("y"), f.field("y"))};
}

std::vector<Point> read_path(const Fields& f, PointReader read_point, std::size_t min_points) {
    const std::string field = f.field("path");
    const json& path = read_array(f.required("path"), field);
    check_path_size(path, field, min_points);
    std::vector<Point> points;
    points.reserve(path.size());
    for (std::size_t i = 0; i < path.size(); ++i) {
        points.push_back(read_point(path[i], indexed(field, i)));
    }
    return points;
}

Action read_type_action(const Fields& f) {
    return Type{read_typed_text(f.required("text"), f.field("text"))};
}

Action read_zoom_action(const Fields& f) {
    return read_region(f.required("region"), f.field("region"));
}

}  // namespace deskbox::input::dialects
