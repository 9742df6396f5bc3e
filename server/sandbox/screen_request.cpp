// Reading the screen analysis's requests. The messages are part of the API (tests and clients
// match them): a field's reason follows "field: ".
#include "server/sandbox/screen_request.hpp"

#include <cmath>
#include <set>

#include "server/sandbox/request_reader.hpp"

namespace deskbox::server {

using nlohmann::json;
using streaming::Rect;

namespace {

constexpr int kDefaultWaitMs = 10'000;
constexpr int kMaxWaitMs = 120'000;
constexpr int kMaxTargetWaitMs = 60'000;
constexpr int kDefaultStableMs = 300;

// A request object's fields, each read once, type-checked, errors naming prefix.field.
class Body {
  public:
    Body(const json& body, std::string prefix, const std::set<std::string>& allowed)
        : body_(body), prefix_(std::move(prefix)) {
        if (!body_.is_object())
            throw invalid_field(prefix_,
                                "expected a JSON object, got " + std::string(body_.type_name()));
        RequestReader fields(body_, prefix_);  // the one unknown-field rule
        for (const auto& name : allowed) fields.raw(name);
        fields.finish();
    }
    std::string field(const std::string& name) const { return join_field(prefix_, name); }
    const std::string& prefix() const { return prefix_; }
    bool has(const char* name) const { return get(name) != nullptr; }
    const json* get(const char* name) const {
        auto it = body_.find(name);
        return it == body_.end() || it->is_null() ? nullptr : &*it;
    }
    double number(const char* name, double lo, double hi, double fallback) const {
        const json* v = get(name);
        if (!v) return fallback;
        if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi))
            throw invalid_field(field(name),
                                "expected a number from " + shown(lo) + " to " + shown(hi));
        return v->get<double>();
    }
    int integer(const char* name, int lo, int hi, int fallback) const {
        const json* v = get(name);
        if (!v) return fallback;
        if (!v->is_number_integer() &&
            !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()))
            throw invalid_field(field(name), "expected a whole number");
        const double d = v->get<double>();
        if (d < lo || d > hi)
            throw invalid_field(field(name),
                                "expected " + std::to_string(lo) + " to " + std::to_string(hi));
        return int(d);
    }
    bool flag(const char* name, bool fallback) const {
        const json* v = get(name);
        if (!v) return fallback;
        if (!v->is_boolean()) throw invalid_field(field(name), "expected true or false");
        return v->get<bool>();
    }
    std::string string(const char* name) const {
        const json* v = get(name);
        if (!v) return {};
        if (!v->is_string()) throw invalid_field(field(name), "expected a string");
        return v->get<std::string>();
    }
    std::optional<Rect> rect(const char* name) const {
        const json* v = get(name);
        return v ? std::optional(read_rect(*v, field(name))) : std::nullopt;
    }
    static Rect read_rect(const json& v, const std::string& field) {
        if (!v.is_array() || v.size() != 4)
            throw invalid_field(field, "expected [x, y, width, height]");
        int n[4];
        for (int i = 0; i < 4; ++i) {
            if (!v[i].is_number_integer())
                throw invalid_field(field, "expected [x, y, width, height] in whole pixels");
            const auto value = v[i].get<long long>();
            if (value < 0 || value > 32767) throw invalid_field(field, "values must be 0..32767");
            n[i] = int(value);
        }
        if (n[2] == 0 || n[3] == 0) throw invalid_field(field, "width and height must be > 0");
        return {n[0], n[1], n[2], n[3]};
    }

  private:
    static std::string shown(double v) {
        std::string s = std::to_string(v);
        while (s.size() > 1 && s.back() == '0') s.pop_back();
        if (!s.empty() && s.back() == '.') s.pop_back();
        return s;
    }
    const json& body_;
    std::string prefix_;
};

const std::set<std::string> kSeekFields = {
    "image", "text", "region", "threshold", "max_results", "scales", "grayscale", "exact", "lang"};

void read_scales(const Body& b, TargetSpec& spec) {
    const json* scales = b.get("scales");
    if (!scales) return;
    if (!scales->is_array() || scales->empty() || scales->size() > 8)
        throw invalid_field(b.field("scales"), "expected 1 to 8 numbers");
    spec.search.scales.clear();
    for (const auto& s : *scales) {
        if (!s.is_number() || !(s.get<double>() >= 0.25 && s.get<double>() <= 4))
            throw invalid_field(b.field("scales"), "each scale must be from 0.25 to 4");
        spec.search.scales.push_back(s.get<double>());
    }
}

// The seek fields of `b` (locate, wait, target); `need`: one of image / text is required.
void read_seek(const Body& b, TargetSpec& spec, bool need) {
    const bool image = b.has("image"), text = b.has("text");
    if (image && text) throw invalid_field(b.field("text"), "give image or text, not both");
    if (need && !image && !text) throw invalid_field(b.field("image"), "give image or text");
    if (image) {
        const json& v = *b.get("image");
        if (!v.is_string()) throw invalid_field(b.field("image"), "expected base64 of a PNG image");
        spec.image = checked(b.prefix(), [&] {
            return analysis::decode_base64_picture(v.get<std::string>(), "image");
        });
    }
    if (text) {
        spec.text = b.string("text");
        if (spec.text.find_first_not_of(" \t\n\r") == std::string::npos)
            throw invalid_field(b.field("text"), "expected some text to find");
        if (spec.text.size() > 1000) throw invalid_field(b.field("text"), "at most 1000 bytes");
    }
    spec.search.region = b.rect("region");
    spec.search.threshold = b.number("threshold", 0, 1, 0.9);
    spec.search.max_results = b.integer("max_results", 1, 100, 10);
    read_scales(b, spec);
    spec.search.grayscale = b.flag("grayscale", false);
    spec.exact = b.flag("exact", false);
    if (b.has("lang")) spec.lang = b.string("lang");
    for (const char* name : {"exact", "lang"})
        if (image && b.has(name)) throw invalid_field(b.field(name), "only for text");
    for (const char* name : {"scales", "grayscale"})
        if (text && b.has(name)) throw invalid_field(b.field(name), "only for image");
}

}  // namespace

std::string join_field(const std::string& prefix, const std::string& name) {
    return prefix.empty() ? name : prefix + "." + name;
}

TargetSpec read_locate_request(const json& body) {
    TargetSpec spec;
    read_seek(Body(body, "", kSeekFields), spec, true);
    return spec;
}

OcrRequest read_ocr_request(const json& body) {
    Body b(body, "", {"region", "lang", "min_confidence"});
    OcrRequest request;
    request.region = b.rect("region");
    if (b.has("lang")) request.lang = b.string("lang");
    request.min_confidence = b.number("min_confidence", 0, 100, 0);
    return request;
}

CompareRequest read_compare_request(const json& body) {
    Body b(body, "", {"baseline", "region", "mask", "tolerance", "diff"});
    const json* baseline = b.get("baseline");
    if (!baseline || !baseline->is_string())
        throw invalid_field("baseline", "expected base64 of a PNG image");
    CompareRequest request;
    request.baseline = checked("", [&] {
        return analysis::decode_base64_picture(baseline->get<std::string>(), "baseline");
    });
    request.region = b.rect("region");
    request.tolerance = b.integer("tolerance", 0, 255, 0);
    request.diff_image = b.flag("diff", false);
    if (const json* m = b.get("mask")) {
        if (!m->is_array() || m->size() > 1000)
            throw invalid_field("mask", "expected a list of [x, y, width, height] (at most 1000)");
        for (std::size_t i = 0; i < m->size(); ++i)
            request.mask.push_back(Body::read_rect((*m)[i], "mask[" + std::to_string(i) + "]"));
    }
    return request;
}

WaitRequest read_wait_request(const json& body) {
    std::set<std::string> fields = kSeekFields;
    fields.insert({"until", "timeout_ms", "stable_ms", "since"});
    Body b(body, "", fields);
    WaitRequest request;
    const std::string& until = request.until = b.string("until");
    static const std::set<std::string> kinds = {"change", "stable", "image", "text", "gone"};
    if (!kinds.count(until))
        throw invalid_field("until", "expected change, stable, image, text or gone");
    TargetSpec& spec = request.seek;
    read_seek(b, spec, until == "image" || until == "text" || until == "gone");
    if (until == "image" && !spec.image) throw invalid_field("image", "required for until=image");
    if (until == "text" && spec.text.empty())
        throw invalid_field("text", "required for until=text");
    if ((until == "change" || until == "stable") && (spec.image || !spec.text.empty()))
        throw invalid_field(spec.image ? "image" : "text", "not used by until=" + until);
    request.timeout_ms = b.integer("timeout_ms", 0, kMaxWaitMs, kDefaultWaitMs);
    request.stable_ms = b.integer("stable_ms", 1, 60'000, kDefaultStableMs);
    if (b.has("stable_ms") && until != "stable")
        throw invalid_field("stable_ms", "only for until=stable");
    if (const json* s = b.get("since")) {
        if (!s->is_number_unsigned()) throw invalid_field("since", "expected a frame_version");
        if (until != "change") throw invalid_field("since", "only for until=change");
        request.since = s->get<std::uint64_t>();
    }
    return request;
}

namespace {

// The target's own fields (index, offset, timeout_ms), whichever kind it is.
void read_aim(const Body& b, TargetSpec& spec) {
    spec.index = b.integer("index", 0, 99, 0);
    spec.search.max_results = spec.index + 1;
    if (const json* offset = b.get("offset")) {
        if (!offset->is_array() || offset->size() != 2 || !(*offset)[0].is_number_integer() ||
            !(*offset)[1].is_number_integer())
            throw invalid_field(b.field("offset"), "expected [dx, dy] in whole pixels");
        spec.offset = {(*offset)[0].get<int>(), (*offset)[1].get<int>()};
    }
    spec.timeout_ms = b.integer("timeout_ms", 0, kMaxTargetWaitMs, kDefaultTargetWaitMs);
}

TargetSpec read_accessible_target(const json& object, const std::string& field) {
    Body b(object, field,
           {"role", "name", "name_match", "states", "app", "index", "offset", "timeout_ms"});
    TargetSpec spec;
    spec.field = field;
    json find = json::object();
    for (const char* name : {"role", "name", "name_match", "app"})
        if (b.has(name)) find[name] = b.string(name);
    if (const json* states = b.get("states")) find["states"] = *states;
    read_aim(b, spec);
    // Elements off the screen match too, and are passed over (SandboxInput::aim_at_accessible).
    find["max_results"] = spec.index + 20;
    spec.text = find.value("name", "");
    spec.accessible = std::move(find);
    return spec;
}

}  // namespace

TargetSpec read_target(const input::Target& target, const std::string& field) {
    json object = json::parse(target.json);
    if (object.is_object() && object.contains("role")) return read_accessible_target(object, field);
    std::set<std::string> allowed = kSeekFields;
    allowed.insert({"index", "offset", "timeout_ms"});
    allowed.erase("max_results");
    Body b(object, field, allowed);
    TargetSpec spec;
    spec.field = field;
    read_seek(b, spec, true);
    read_aim(b, spec);
    return spec;
}

}  // namespace deskbox::server
