#include "input/x11/spare_keycodes.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "input/keynames.hpp"

namespace deskbox::input::x11 {
namespace {

// evdev's KEY_RESERVED is keycode 8; spare keycodes start after it.
constexpr int kFirstSpareKeycode = 9;

bool all_empty(const std::vector<Keysym>& keysyms) {
    return std::all_of(keysyms.begin(), keysyms.end(), [](Keysym s) { return s == 0; });
}

// The key holds exactly what we mapped: both keysyms, and nothing else but NoSymbol.
bool holds_only(const std::vector<Keysym>& keysyms, const std::array<Keysym, 2>& contents) {
    const auto has = [&](Keysym s) {
        return std::find(keysyms.begin(), keysyms.end(), s) != keysyms.end();
    };
    return contents[0] != 0 && has(contents[0]) && has(contents[1]) &&
           std::all_of(keysyms.begin(), keysyms.end(),
                       [&](Keysym s) { return s == 0 || s == contents[0] || s == contents[1]; });
}

}  // namespace

std::array<Keysym, 2> SpareKeycodes::Key::contents() const {
    return {keysyms[0] ? keysyms[0] : keysyms[1], keysyms[1] ? keysyms[1] : keysyms[0]};
}

SpareKeycodes::SpareKeycodes(ClientModel model, Now now) : model_(model), now_(std::move(now)) {
    index_.fill(-1);
}

void SpareKeycodes::rescan(int first, int last,
                           const std::function<std::vector<Keysym>(int)>& keysyms_of) {
    std::vector<Key> next;
    for (int kc = std::max(first, kFirstSpareKeycode); kc <= std::min(last, 255); ++kc) {
        const std::vector<Keysym> keysyms = keysyms_of(kc);
        const bool empty = all_empty(keysyms);
        if (const int old = index_[kc]; old >= 0) {
            Key key = keys_[old];
            if (empty) {
                key.keysyms = {};
                next.push_back(key);
            } else if (holds_only(keysyms, key.contents())) {
                next.push_back(key);
            }  // else someone else mapped it: no longer ours
        } else if (empty) {
            Key key;
            key.keycode = static_cast<Keycode>(kc);
            next.push_back(key);
        }
    }
    keys_ = std::move(next);
    index_.fill(-1);
    for (std::size_t i = 0; i < keys_.size(); ++i) index_[keys_[i].keycode] = static_cast<int>(i);
}

std::vector<Keycode> SpareKeycodes::keycodes() const {
    std::vector<Keycode> out;
    out.reserve(keys_.size());
    for (const Key& key : keys_) out.push_back(key.keycode);
    return out;
}

std::size_t SpareKeycodes::capacity(bool whole_key) const {
    return keys_.size() * static_cast<std::size_t>(levels_for(whole_key));
}

std::optional<std::size_t> SpareKeycodes::find_position(Keysym keysym, bool whole_key) const {
    for (int level = 0; level < levels_for(whole_key); ++level) {
        for (std::size_t i = 0; i < keys_.size(); ++i) {
            const bool match = whole_key
                                   ? keys_[i].contents() == std::array<Keysym, 2>{keysym, keysym}
                                   : keys_[i].keysyms[level] == keysym;
            if (match) return i * 2 + level;
        }
    }
    return std::nullopt;
}

std::optional<SparePlace> SpareKeycodes::find(Keysym keysym, bool whole_key) const {
    const auto position = find_position(keysym, whole_key);
    if (!position) return std::nullopt;
    return SparePlace{keys_[*position / 2].keycode, whole_key ? 0 : static_cast<int>(*position % 2),
                      whole_key};
}

// Positions a missing keysym may take: not `needed` by a keysym of this batch, not on a key
// held down; for a whole key, level 0 of a key none of whose levels is needed.
std::vector<std::size_t> SpareKeycodes::free_positions(const std::vector<bool>& needed,
                                                       bool whole_key) const {
    std::vector<std::size_t> free;
    for (std::size_t i = 0; i < keys_.size(); ++i) {
        if (keys_[i].pressed > 0) continue;
        if (whole_key) {
            if (!needed[2 * i] && !needed[2 * i + 1]) free.push_back(2 * i);
            continue;
        }
        for (int level = 0; level < usable_levels_; ++level) {
            if (!needed[2 * i + level]) free.push_back(2 * i + level);
        }
    }
    return free;
}

void SpareKeycodes::throw_no_room(Keysym keysym) const {
    if (keys_.empty()) {
        throw std::runtime_error(describe_keysym(keysym) +
                                 " is not on the keyboard and the keymap has no spare keycode to "
                                 "map it to");
    }
    throw std::runtime_error(describe_keysym(keysym) + " is not on the keyboard and all " +
                             std::to_string(keys_.size()) +
                             " spare keycodes are held down by this action");
}

SpareRemap SpareKeycodes::map(const std::vector<Keysym>& wanted, bool whole_key,
                              std::size_t at_least) {
    std::vector<bool> needed(keys_.size() * 2, false);
    std::vector<Keysym> missing;
    for (Keysym keysym : wanted) {
        if (auto position = find_position(keysym, whole_key)) {
            needed[*position] = true;
            if (whole_key) needed[*position + 1] = true;
        } else {
            missing.push_back(keysym);
        }
    }
    if (missing.empty()) return {};

    std::vector<std::size_t> free = free_positions(needed, whole_key);
    if (free.size() < missing.size()) throw_no_room(missing[free.size()]);
    const auto age = [&](std::size_t position) {
        const Key& key = keys_[position / 2];
        return whole_key ? std::max(key.last_use[0], key.last_use[1]) : key.last_use[position % 2];
    };
    const auto reusable_at = [&](std::size_t position) {
        const Key& key = keys_[position / 2];
        return whole_key ? std::max(key.reusable_at[0], key.reusable_at[1])
                         : key.reusable_at[position % 2];
    };
    const Clock::time_point now = now_();
    // Reusable now (least recently used first), then the soonest reusable.
    std::stable_sort(free.begin(), free.end(), [&](std::size_t a, std::size_t b) {
        const bool a_ready = reusable_at(a) <= now, b_ready = reusable_at(b) <= now;
        if (a_ready != b_ready) return a_ready;
        return a_ready ? age(a) < age(b) : reusable_at(a) < reusable_at(b);
    });

    Clock::time_point ready{};
    std::vector<std::size_t> changed;
    for (std::size_t i = 0; i < missing.size(); ++i) {
        const std::size_t position = free[i];
        if (i >= std::max<std::size_t>(at_least, 1) && reusable_at(position) > now) break;
        Key& key = keys_[position / 2];
        if (whole_key) {
            ready = std::max({ready, key.reusable_at[0], key.reusable_at[1]});
            key.keysyms = {missing[i], missing[i]};
            key.last_use = {++use_counter_, use_counter_};
        } else {
            const std::size_t level = position % 2;
            ready = std::max(ready, key.reusable_at[level]);
            key.keysyms[level] = missing[i];
            key.last_use[level] = ++use_counter_;
        }
        changed.push_back(position / 2);
    }
    return remap(std::move(changed), ready);
}

SpareRemap SpareKeycodes::clear() {
    std::vector<std::size_t> used;
    Clock::time_point ready{};
    for (std::size_t i = 0; i < keys_.size(); ++i) {
        Key& key = keys_[i];
        if (key.keysyms == std::array<Keysym, 2>{}) continue;
        ready = std::max({ready, key.reusable_at[0], key.reusable_at[1]});
        key.keysyms = {};
        used.push_back(i);
    }
    return remap(std::move(used), ready);
}

SpareRemap SpareKeycodes::remap(std::vector<std::size_t> keys, Clock::time_point ready) const {
    SpareRemap out;
    if (keys.empty()) return out;
    if (ready > now_()) out.wait_until = ready;
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (std::size_t i = 0; i < keys.size(); ++i) {
        const Key& key = keys_[keys[i]];
        if (i == 0 || key.keycode != keys_[keys[i - 1]].keycode + 1)
            out.runs.push_back({key.keycode, {}});
        const auto contents = key.contents();
        out.runs.back().keysyms.insert(out.runs.back().keysyms.end(), contents.begin(),
                                       contents.end());
    }
    return out;
}

void SpareKeycodes::note_key(int keycode, bool down, unsigned levels) {
    if (down) client_caught_up_at_ = std::max(client_caught_up_at_, now_()) + model_.key_cost;
    if (!contains(keycode)) return;
    Key& key = keys_[index_[keycode]];
    key.pressed += down ? 1 : -1;
    for (int level = 0; level < 2; ++level) {
        if (levels != 0 && !(levels & (1u << level))) continue;
        key.last_use[level] = ++use_counter_;
        key.reusable_at[level] = client_caught_up_at_ + model_.reuse_interval;
    }
}

}  // namespace deskbox::input::x11
