// SandboxScreen::wait: until the screen changes, is stable, shows an image or text, or no longer
// does. Woken by the mirror's damage, never by polling; each kind in its own function.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "server/sandbox/screen_analysis.hpp"

namespace deskbox::server {

using nlohmann::json;
using streaming::Rect;

namespace {

constexpr auto kForever = std::chrono::milliseconds(120'000);  // the longest wait there is

// Screen pixels to the client's and back (identity without an API resolution).
Rect scale_rect(const Rect& r, double sx, double sy) {
    const int x0 = int(std::floor(r.x * sx)), y0 = int(std::floor(r.y * sy));
    const int x1 = int(std::ceil(r.right() * sx)), y1 = int(std::ceil(r.bottom() * sy));
    return {x0, y0, std::max(1, x1 - x0), std::max(1, y1 - y0)};
}

// Which rects of `changes` (screen pixels) touch `region` (screen pixels), clipped to it.
std::vector<Rect> touching(const streaming::FrameChanges& changes, const Rect& region) {
    std::vector<Rect> out;
    for (const auto& r : changes.rects) {
        Rect hit = intersect(r, region);
        if (!hit.empty()) out.push_back(hit);
    }
    return out;
}

// Boxes that overlap or touch become one (a glyph across two damage tiles is one change).
std::vector<Rect> merge_touching(std::vector<Rect> boxes) {
    for (bool merged = true; merged;) {
        merged = false;
        for (std::size_t i = 0; i < boxes.size() && !merged; ++i)
            for (std::size_t j = i + 1; j < boxes.size() && !merged; ++j) {
                const Rect grown{boxes[i].x - 1, boxes[i].y - 1, boxes[i].width + 2,
                                 boxes[i].height + 2};
                if (intersect(grown, boxes[j]).empty()) continue;
                boxes[i] = bounding(boxes[i], boxes[j]);
                boxes.erase(boxes.begin() + std::ptrdiff_t(j));
                merged = true;
            }
    }
    return boxes;
}

// The tight box of the pixels that differ between two frames of one size inside `rect`.
Rect changed_box(const streaming::Frame& a, const streaming::Frame& b, const Rect& rect) {
    Rect box;
    for (int y = rect.y; y < rect.bottom(); ++y) {
        const std::size_t row = std::size_t(y) * a.stride();
        if (!std::memcmp(a.pixels.data() + row + std::size_t(rect.x) * 4,
                         b.pixels.data() + row + std::size_t(rect.x) * 4,
                         std::size_t(rect.width) * 4))
            continue;
        for (int x = rect.x; x < rect.right(); ++x) {
            const std::size_t at = row + std::size_t(x) * 4;
            if (std::memcmp(a.pixels.data() + at, b.pixels.data() + at, 3))
                box = bounding(box, Rect{x, y, 1, 1});
        }
    }
    return box;
}

}  // namespace

struct SandboxScreen::WaitRun {
    const WaitRequest& request;
    AnalysisClock::time_point start;
    AnalysisClock::time_point deadline;
    View view;           // the frame the wait started with (then the latest one looked at)
    Rect region;         // API pixels
    double to_screen_x;  // API to screen pixels
    double to_screen_y;
    Rect screen_region;  // the region in screen pixels, for the mirror's damage
    streaming::FrameMirror& mirror;

    json answer(bool matched, std::uint64_t version) const {
        return json{{"matched", matched},
                    {"until", request.until},
                    {"elapsed_ms", ms_since(start)},
                    {"frame_version", version}};
    }
    std::chrono::milliseconds remaining() const {
        return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                     AnalysisClock::now());
    }
    // Sleeps until the frame passes `version` or the deadline (or `limit`); false at the end.
    bool next_frame(std::uint64_t version, std::chrono::milliseconds limit) const {
        limit = std::min(limit, remaining());
        if (limit.count() <= 0) return false;
        const bool woke = mirror.wait_for_change(version, kNoCursorWake, limit);
        if (mirror.closed())
            throw SandboxError(SandboxFault::conflict, "conflict",
                               "the sandbox ended while the wait was waiting");
        return woke;
    }
    bool touches_region(const streaming::FrameChanges& changes) const {
        return changes.full || !touching(changes, screen_region).empty();
    }
};

json SandboxScreen::wait(const WaitRequest& request) {
    const auto start = AnalysisClock::now();
    const auto deadline = start + std::chrono::milliseconds(request.timeout_ms);
    WaitSlot slot(*analysis_);
    auto view = this->view(true);
    const Rect region = view.region(request.seek.search.region, "region");
    const auto since = request.since;
    if (since && *since > view.snapshot.version)
        throw invalid_field("since", "frame " + std::to_string(*since) +
                                         " has not happened yet (now " +
                                         std::to_string(view.snapshot.version) + ")");
    const input::Size screen = size();
    const double to_screen_x = double(screen.width) / view.width();
    const double to_screen_y = double(screen.height) / view.height();
    const Rect screen_region = intersect(scale_rect(region, to_screen_x, to_screen_y),
                                         {0, 0, screen.width, screen.height});
    WaitRun run{request,     start,       deadline,      std::move(view), region,
                to_screen_x, to_screen_y, screen_region, mirror_};
    if (request.until == "change") return wait_for_change(run);
    if (request.until == "stable") return wait_for_stable(run);
    return wait_for_sight(run);
}

json SandboxScreen::wait_for_change(WaitRun& run) {
    // From `since`, or from the frame the wait started with (kept to compare pixels, so a
    // damage rect that only brushes the region does not count).
    const auto& snapshot = run.view.snapshot;
    const auto since = run.request.since;
    const std::uint64_t from = since.value_or(snapshot.version);
    auto baseline = since && *since != snapshot.version ? nullptr : snapshot.frame;
    std::uint64_t seen = from;
    while (true) {
        auto update = mirror_.update_since(from);
        if (update.snapshot.version != seen || from != snapshot.version) {
            auto hits = touching(update.changes, run.screen_region);
            const bool reset = update.snapshot.generation != snapshot.generation;
            if (baseline && !reset) {
                // Damage comes in tiles: keep the pixels that really differ.
                std::vector<Rect> exact;
                for (const auto& r : hits) {
                    Rect box = changed_box(*baseline, *update.snapshot.frame, r);
                    if (!box.empty()) exact.push_back(box);
                }
                hits = merge_touching(std::move(exact));
            }
            if (!hits.empty() || reset) {
                json out = run.answer(true, update.snapshot.version);
                json changed = json::array();
                for (const auto& r : hits)
                    changed.push_back(rect_json(intersect(
                        scale_rect(r, 1 / run.to_screen_x, 1 / run.to_screen_y), run.region)));
                out["changed"] = changed;
                return out;
            }
            seen = update.snapshot.version;
        }
        if (!run.next_frame(seen, kForever)) return run.answer(false, mirror_.version());
    }
}

json SandboxScreen::wait_for_stable(WaitRun& run) {
    std::uint64_t seen = run.view.snapshot.version;
    auto quiet_since = AnalysisClock::now();
    const auto quiet_needed = std::chrono::milliseconds(run.request.stable_ms);
    while (true) {
        const auto quiet_for = AnalysisClock::now() - quiet_since;
        if (quiet_for >= quiet_needed) return run.answer(true, seen);
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            quiet_needed - quiet_for + std::chrono::milliseconds(1));
        if (run.remaining().count() <= 0) return run.answer(false, mirror_.version());
        if (!run.next_frame(seen, left)) continue;  // quiet so far: check the time again
        auto changes = mirror_.changes_since(seen);
        if (run.touches_region(changes)) quiet_since = AnalysisClock::now();
        seen = changes.version;
    }
}

// image, text, gone: look at each new frame (the latest one, after a slow look).
json SandboxScreen::wait_for_sight(WaitRun& run) {
    const TargetSpec& spec = run.request.seek;
    const bool want_gone = run.request.until == "gone";
    while (true) {
        auto found = find_on(*analysis_, run.view, spec);
        if (found.empty() == want_gone) {
            json out = run.answer(true, run.view.snapshot.version);
            if (!found.empty()) out["match"] = found_json(found.front(), !spec.image);
            return out;
        }
        const std::uint64_t seen = run.view.snapshot.version;
        while (true) {
            if (!run.next_frame(seen, kForever)) return run.answer(false, mirror_.version());
            if (run.touches_region(mirror_.changes_since(seen))) break;
        }
        run.view = view(false);
    }
}

}  // namespace deskbox::server
