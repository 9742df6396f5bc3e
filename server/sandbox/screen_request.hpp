// What a client asks of the screen's analysis (locate, ocr, compare, wait, and the targets of
// actions), read from its JSON body into typed requests: each field once, type- and
// range-checked, unknown fields refused (RequestReader's rule), errors naming prefix.field.
// Checks that need the screen (a region lying on it) are the screen's (sandbox_screen.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/actions.hpp"
#include "server/sandbox/sandbox_error.hpp"
#include "streaming/analysis/image_search.hpp"

namespace deskbox::server {

inline constexpr int kDefaultTargetWaitMs = 5'000;

// What to look for: an image or a text, and how (locate, wait, an action's target).
struct TargetSpec {
    std::optional<analysis::Picture> image;
    std::string text;
    analysis::ImageSearch search;  // region in API pixels; absent: the whole screen
    bool exact = false;
    std::string lang = "eng";
    // Targets only.
    int index = 0;
    input::Point offset;
    int timeout_ms = kDefaultTargetWaitMs;
    std::string field;  // where the spec sat ("target", "actions[2].target", "" for locate)
    // An accessible element ({"role", "name", ...} target): the agent's accessibility.find
    // params, found in the AT-SPI tree instead of on the screen's pixels.
    std::optional<nlohmann::json> accessible;
};

struct OcrRequest {
    std::optional<streaming::Rect> region;
    std::string lang = "eng";
    double min_confidence = 0;
};

struct CompareRequest {
    analysis::Picture baseline;
    std::optional<streaming::Rect> region;
    std::vector<streaming::Rect> mask;  // screen (API) pixels, each checked to lie on it
    int tolerance = 0;
    bool diff_image = false;
};

struct WaitRequest {
    std::string until;  // change, stable, image, text or gone
    TargetSpec seek;    // image / text / gone: what to look for; region for all
    int timeout_ms = 0;
    int stable_ms = 0;
    std::optional<std::uint64_t> since;  // until=change: changes after this frame
};

// Each throws SandboxError (invalid) bad_request naming the field at fault.
TargetSpec read_locate_request(const nlohmann::json& body);
OcrRequest read_ocr_request(const nlohmann::json& body);
CompareRequest read_compare_request(const nlohmann::json& body);
WaitRequest read_wait_request(const nlohmann::json& body);
// An action's target (input::Target's JSON, shape-checked by the input layer); `field` is where
// it sat ("actions[2].target"). An image, a text, or an accessible element: {"role", "name"?,
// "name_match"?, "states"?, "app"?} (the agent checks the values, errors named by the host).
TargetSpec read_target(const input::Target& target, const std::string& field);

std::string join_field(const std::string& prefix, const std::string& name);

// Analysis errors name a field of the request; `prefix` puts them where the request had it.
template <typename F>
auto checked(const std::string& prefix, F&& f) {
    try {
        return f();
    } catch (const streaming::ParameterError& e) {
        const std::string field = join_field(prefix, e.field());
        std::string reason = e.what();
        if (reason.rfind(e.field() + ": ", 0) == 0) reason = reason.substr(e.field().size() + 2);
        throw invalid_field(field, reason);
    }
}

}  // namespace deskbox::server
