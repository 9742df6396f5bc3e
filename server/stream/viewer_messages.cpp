#include "server/stream/viewer_messages.hpp"

#include <algorithm>
#include <stdexcept>

#include "common/utf8.hpp"
#include "input/keynames.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {

int int_field(const json& m, const char* name) {
    auto it = m.find(name);
    if (it == m.end() || !it->is_number())
        throw std::invalid_argument(std::string("'") + name + "' must be a number");
    double v = it->get<double>();
    if (!(v > -1e9 && v < 1e9))
        throw std::invalid_argument(std::string("'") + name + "' is out of range");
    return static_cast<int>(v);
}

ViewerRequest bad(std::string why) {
    ViewerRequest r;
    r.kind = ViewerRequest::Kind::bad;
    r.error = utf8::escape_invalid(why);
    return r;
}

std::vector<input::Action> input_actions(const std::string& type, const json& m,
                                         input::PointerInput& pointer) {
    if (type == "pointer") {
        int buttons = m.contains("buttons") ? int_field(m, "buttons") : 0;
        return pointer.pointer(int_field(m, "x"), int_field(m, "y"),
                               static_cast<unsigned>(buttons));
    }
    if (type == "wheel")
        return pointer.wheel(int_field(m, "x"), int_field(m, "y"),
                             m.contains("dx") ? int_field(m, "dx") : 0,
                             m.contains("dy") ? int_field(m, "dy") : 0);
    if (type == "key") {
        if (!m.contains("down") || !m["down"].is_boolean())
            throw std::invalid_argument("'down' must be true or false");
        std::uint32_t keysym = 0;
        if (m.contains("keysym")) {
            keysym = static_cast<std::uint32_t>(int_field(m, "keysym"));
        } else if (m.contains("key") && m["key"].is_string()) {
            const auto& name = m["key"].get_ref<const std::string&>();
            auto resolved = input::keysym_from_name(name);
            if (!resolved) throw std::invalid_argument("unknown key '" + name.substr(0, 32) + "'");
            keysym = *resolved;
        } else {
            throw std::invalid_argument("a key message needs 'keysym' or 'key'");
        }
        return pointer.key(keysym, m["down"].get<bool>());
    }
    // "text"
    if (!m.contains("text") || !m["text"].is_string())
        throw std::invalid_argument("'text' must be a string");
    std::string typed = m["text"];
    if (typed.size() > input::kMaxTextBytes) throw std::invalid_argument("'text' is too long");
    std::vector<input::Action> actions;
    actions.push_back(input::Type{std::move(typed)});
    return actions;
}

}  // namespace

ViewerRequest decode_viewer_message(std::string_view text, input::PointerInput& pointer,
                                    bool control) {
    // A WebSocket text message is UTF-8 by the RFC; Beast does not check it.
    if (auto at = utf8::first_invalid(text))
        return bad("the message is not valid UTF-8 (byte " + std::to_string(*at) + ")");
    json m = json::parse(text, nullptr, false);
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
        return bad("expected a JSON object with a string \"type\"");
    const std::string type = m["type"];
    ViewerRequest r;
    if (type == "ping") {
        r.kind = ViewerRequest::Kind::pong;
        r.reply = {{"type", "pong"}};
        // Echoed as sent: a number (the viewer's clock), never a structure to serialize.
        if (m.contains("t")) {
            if (!m["t"].is_number()) return bad("ping: 't' must be a number");
            r.reply["t"] = m["t"];
        }
        return r;
    }
    if (type == "keyframe") {
        r.kind = ViewerRequest::Kind::keyframe;
        return r;
    }
    if (type != "pointer" && type != "wheel" && type != "key" && type != "text")
        return bad("unknown message type '" + type.substr(0, 32) + "'");
    if (!control) {
        r.kind = ViewerRequest::Kind::view_only;
        return r;
    }
    try {
        r.actions = input_actions(type, m, pointer);
        r.kind = ViewerRequest::Kind::input;
        return r;
    } catch (const std::invalid_argument& e) {
        return bad(type + ": " + e.what());
    }
}

bool MessageRate::allow(Clock::time_point now) {
    if (now > last_) {
        tokens_ = std::min(
            kBurst, tokens_ + std::chrono::duration<double>(now - last_).count() * kPerSecond);
        last_ = now;
    }
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
}

}  // namespace deskbox::server
