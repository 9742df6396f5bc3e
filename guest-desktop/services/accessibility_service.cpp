#include "guest-desktop/services/accessibility_service.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <X11/Xlib.h>

#include "common/utf8.hpp"
#include "guest-desktop/services/atspi_library.hpp"
#include "guest-desktop/services/params.hpp"
#include "guest-desktop/services/service_error.hpp"
#include "x11/connection.hpp"
#include "x11/properties.hpp"

namespace deskbox::services {

using atspi::AtspiAccessible;
using atspi::Functions;
using nlohmann::json;

namespace {

constexpr int kStateActive = 1;    // ATSPI_STATE_ACTIVE
constexpr int kStateDefunct = 6;   // ATSPI_STATE_DEFUNCT
constexpr int kStateShowing = 25;  // ATSPI_STATE_SHOWING
constexpr int kStateEditable = 7;  // ATSPI_STATE_EDITABLE
constexpr int kMaxTextChars = 4096;
constexpr std::size_t kMaxHeldReferences = 50'000;

const char* const kNoTree = "no application exposes an accessibility tree";

// A reference libatspi gave us, released with g_object_unref.
class ObjectRef {
  public:
    ObjectRef() = default;
    ObjectRef(const Functions& f, void* object) : f_(&f), object_(object) {}
    ObjectRef(ObjectRef&& other) noexcept
        : f_(other.f_), object_(std::exchange(other.object_, nullptr)) {}
    ObjectRef& operator=(ObjectRef&& other) noexcept {
        if (this != &other) {
            reset();
            f_ = other.f_;
            object_ = std::exchange(other.object_, nullptr);
        }
        return *this;
    }
    ObjectRef(const ObjectRef&) = delete;
    ObjectRef& operator=(const ObjectRef&) = delete;
    ~ObjectRef() { reset(); }

    ObjectRef share() const {
        return object_ ? ObjectRef(*f_, f_->object_ref(object_)) : ObjectRef();
    }
    AtspiAccessible* get() const { return object_; }
    explicit operator bool() const { return object_ != nullptr; }

  private:
    void reset() {
        if (object_) f_->object_unref(object_);
        object_ = nullptr;
    }
    const Functions* f_ = nullptr;
    void* object_ = nullptr;
};

// The GError** out-parameter of a libatspi call, freed after.
class ErrorSlot {
  public:
    explicit ErrorSlot(const Functions& f) : f_(f) {}
    ~ErrorSlot() {
        if (error_) f_.error_free(error_);
    }
    ErrorSlot(const ErrorSlot&) = delete;
    ErrorSlot& operator=(const ErrorSlot&) = delete;
    atspi::GError** out() { return &error_; }
    bool failed() const { return error_ != nullptr; }
    std::string message() const {
        return error_ && error_->message ? error_->message : "the application did not answer";
    }

  private:
    const Functions& f_;
    atspi::GError* error_ = nullptr;
};

std::string lowercase(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

// "push_button", "Push Button" → "push button": AT-SPI's role names.
std::string normalize_role(std::string role) {
    std::replace(role.begin(), role.end(), '_', ' ');
    return lowercase(std::move(role));
}

// Text without U+FFFC, the character AT-SPI text puts where an embedded child element is.
std::string without_embedded_objects(std::string text) {
    static const std::string kObjectReplacement = "\xEF\xBF\xBC";
    for (auto at = text.find(kObjectReplacement); at != std::string::npos;
         at = text.find(kObjectReplacement, at))
        text.erase(at, kObjectReplacement.size());
    return text;
}

// The accessibility bus's address as at-spi-bus-launcher publishes it (AT_SPI_BUS on the root
// window); empty without one.
std::string published_bus_address(const std::string& display_name) {
    try {
        x11::XConnection x(display_name);
        const Atom atom = XInternAtom(x.get(), "AT_SPI_BUS", True);
        if (atom == None) return {};
        auto value = x11::get_property(x.get(), DefaultRootWindow(x.get()), atom);
        return value ? value->bytes : std::string();
    } catch (const x11::XConnectionError&) {
        return {};
    }
}

enum class NameMatch { exact, substring, regex };

struct WalkLimits {
    std::string scope = "focused";
    std::optional<int> focused_pid;  // scope focused: the focused window's process, if known
    std::optional<std::string> app;  // lowercased
    int max_depth = 40;
    std::size_t max_nodes = 5000;
    bool visible_only = false;
};

struct FindQuery {
    WalkLimits limits;
    std::optional<std::string> role;
    std::optional<std::string> name;
    NameMatch name_match = NameMatch::exact;
    std::optional<std::regex> name_regex;
    std::vector<std::string> states;
    std::size_t max_results = 20;
};

WalkLimits read_limits(const json& p, const char* default_scope) {
    WalkLimits limits;
    limits.scope = params::opt_string(p, "scope").value_or(default_scope);
    if (limits.scope != "focused" && limits.scope != "all")
        throw bad_request("scope", "must be \"focused\" or \"all\"");
    if (auto app = params::opt_string(p, "app")) limits.app = lowercase(*app);
    limits.max_depth = static_cast<int>(params::opt_int(p, "max_depth", 0, 200).value_or(40));
    limits.max_nodes =
        static_cast<std::size_t>(params::opt_int(p, "max_nodes", 1, 50'000).value_or(5000));
    limits.visible_only = params::opt_bool(p, "visible_only").value_or(false);
    return limits;
}

}  // namespace

class AccessibilityService::Engine {
  public:
    explicit Engine(std::string display_name)
        : display_name_(std::move(display_name)), f_(library_.fn()) {
        main_loop_ = f_.main_loop_new(nullptr, 0);
        thread_ = std::thread([this] { f_.main_loop_run(main_loop_); });
    }
    ~Engine() {
        run([this] {
            references_.clear();
            if (connected_) f_.exit();
            f_.main_loop_quit(main_loop_);
            return json();
        });
        thread_.join();
        f_.main_loop_unref(main_loop_);
    }
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Runs `job` on the loop thread and returns its answer (or throws its exception).
    json run(std::function<json()> job) {
        std::promise<json> answer;
        auto future = answer.get_future();
        {
            std::lock_guard lock(jobs_mutex_);
            jobs_.push_back([&answer, &job] {
                try {
                    answer.set_value(job());
                } catch (...) {
                    answer.set_exception(std::current_exception());
                }
            });
        }
        f_.idle_add(&Engine::drain, this);
        return future.get();
    }

    json tree(const WalkLimits& limits) {
        connect();
        json windows = json::array();
        std::size_t count = 0;
        bool truncated = false;
        for_each_window(limits, [&](ObjectRef& window, const json& app) {
            if (count >= limits.max_nodes) {
                truncated = true;
                return;
            }
            json node = subtree(window, 0, limits, count, truncated);
            node["app"] = app["name"];
            if (app.contains("pid")) node["pid"] = app["pid"];
            windows.push_back(std::move(node));
        });
        if (windows.empty() && limits.scope == "focused")
            throw ServiceError(error_code::not_found,
                               "no focused window exposes an accessibility tree (scope \"all\" "
                               "lists every application's windows)");
        return {{"windows", std::move(windows)}, {"node_count", count}, {"truncated", truncated}};
    }

    json find(FindQuery& query) {
        connect();
        if (query.role && !role_names().count(*query.role))
            throw bad_request("role", "unknown role \"" + *query.role +
                                          "\" (AT-SPI role names: \"push button\", \"entry\", "
                                          "\"text\", \"check box\", \"menu item\", ...)");
        std::vector<int> wanted_states;
        for (std::size_t i = 0; i < query.states.size(); ++i) {
            auto it = state_values().find(query.states[i]);
            if (it == state_values().end())
                throw bad_request("states[" + std::to_string(i) + "]",
                                  "unknown state \"" + query.states[i] +
                                      "\" (AT-SPI state names: \"focused\", \"showing\", "
                                      "\"enabled\", \"checked\", \"editable\", ...)");
            wanted_states.push_back(it->second);
        }
        json matches = json::array();
        std::size_t visited = 0;
        bool truncated = false;
        for_each_window(query.limits, [&](ObjectRef& window, const json&) {
            search(window, 0, query, wanted_states, matches, visited, truncated);
        });
        return {{"matches", std::move(matches)}, {"truncated", truncated}};
    }

    json act(const std::string& ref, const std::string& action, const json* value) {
        connect();
        ObjectRef node = resolve(ref);
        if (has_state(node.get(), kStateDefunct))
            throw ServiceError(error_code::not_found, "ref: the element is gone", "ref");
        std::string done = action;
        if (action == "press" || action == "click" || action == "activate") {
            done = do_default_action(node.get());
        } else if (action == "focus") {
            if (!f_.is_component(node.get()))
                throw bad_request("action", "the element cannot take the focus");
            ErrorSlot error(f_);
            if (!f_.component_grab_focus(node.get(), error.out())) throw failed("focus", error);
        } else if (action == "set_value") {
            set_value(node.get(), value);
        } else if (action == "select") {
            select(node.get());
        } else {
            auto names = action_names(node.get());
            auto it = std::find(names.begin(), names.end(), action);
            if (it == names.end())
                throw bad_request("action", "unknown action \"" + action +
                                                "\": press, click, focus, set_value, select or "
                                                "one of the element's actions " +
                                                json(names).dump());
            do_action(node.get(), static_cast<int>(it - names.begin()));
        }
        return {{"ref", ref}, {"action", done}, {"node", describe(node.get())}};
    }

  private:
    static int drain(void* self) {
        auto* engine = static_cast<Engine*>(self);
        std::deque<std::function<void()>> jobs;
        {
            std::lock_guard lock(engine->jobs_mutex_);
            jobs.swap(engine->jobs_);
        }
        for (auto& job : jobs) job();
        return 0;  // G_SOURCE_REMOVE
    }

    // The accessibility bus is the one at-spi-bus-launcher publishes on the X root window (the
    // session's D-Bus starts it when the first accessible application asks). Without it,
    // atspi_init would try the session bus (autolaunching a dbus-daemon when the agent has no
    // address for one) and any later libatspi call would abort the process: so no bus, no
    // init, and the next call looks again.
    void connect() {
        if (connected_) return;
        const std::string address = published_bus_address(display_name_);
        if (address.empty())
            throw ServiceError(error_code::accessibility_unavailable,
                               std::string(kNoTree) +
                                   ": the accessibility bus is not running (no application "
                                   "with accessibility on has started)");
        // libatspi takes the address from the environment first.
        ::setenv("AT_SPI_BUS_ADDRESS", address.c_str(), 1);
        if (f_.init() != 0) {
            f_.exit();
            throw ServiceError(error_code::accessibility_unavailable,
                               std::string(kNoTree) + ": the accessibility bus at " + address +
                                   " does not answer");
        }
        connected_ = true;
    }

    // Each application (a child of the desktop) and its windows; scope "focused" keeps the
    // active window of the application X gives the focus (else every active window).
    template <typename F>
    void for_each_window(const WalkLimits& limits, F&& visit) {
        ObjectRef desktop(f_, f_.get_desktop(0));
        if (!desktop) throw ServiceError(error_code::accessibility_unavailable, kNoTree);
        bool any_application = false;
        for (ObjectRef& app : children(desktop.get())) {
            any_application = true;
            json info = {{"name", string_of(f_.get_name, app.get())}};
            ErrorSlot error(f_);
            int pid = f_.get_process_id(app.get(), error.out());
            if (!error.failed() && pid > 0) info["pid"] = pid;
            if (limits.app && lowercase(info["name"].get<std::string>()) != *limits.app) continue;
            if (limits.scope == "focused" && limits.focused_pid && pid != *limits.focused_pid)
                continue;
            for (ObjectRef& window : children(app.get())) {
                if (limits.scope == "focused" && !has_state(window.get(), kStateActive)) continue;
                visit(window, info);
            }
        }
        if (!any_application)
            throw ServiceError(
                error_code::accessibility_unavailable,
                std::string(kNoTree) + ": no application is registered on the accessibility bus");
    }

    std::vector<ObjectRef> children(AtspiAccessible* node) {
        std::vector<ObjectRef> out;
        ErrorSlot error(f_);
        int count = f_.get_child_count(node, error.out());
        if (error.failed() || count <= 0) return out;
        // Some applications report absurd counts for virtual containers (huge tables).
        count = std::min(count, 10'000);
        for (int i = 0; i < count; ++i) {
            ErrorSlot child_error(f_);
            ObjectRef child(f_, f_.get_child_at_index(node, i, child_error.out()));
            if (child) out.push_back(std::move(child));
        }
        return out;
    }

    json subtree(ObjectRef& node, int depth, const WalkLimits& limits, std::size_t& count,
                 bool& truncated) {
        json out = describe(node.get());
        ++count;
        json kids = json::array();
        if (depth < limits.max_depth) {
            for (ObjectRef& child : children(node.get())) {
                if (limits.visible_only && !has_state(child.get(), kStateShowing)) continue;
                if (count >= limits.max_nodes) {
                    truncated = true;
                    break;
                }
                kids.push_back(subtree(child, depth + 1, limits, count, truncated));
            }
        } else if (child_count(node.get()) > 0) {
            out["children_truncated"] = true;
        }
        out["children"] = std::move(kids);
        return out;
    }

    void search(ObjectRef& node, int depth, const FindQuery& query, const std::vector<int>& states,
                json& matches, std::size_t& visited, bool& truncated) {
        if (matches.size() >= query.max_results || visited >= query.limits.max_nodes) {
            truncated = truncated || visited >= query.limits.max_nodes ||
                        matches.size() >= query.max_results;
            return;
        }
        ++visited;
        if (matches_query(node.get(), query, states)) matches.push_back(describe(node.get()));
        if (depth >= query.limits.max_depth) return;
        for (ObjectRef& child : children(node.get())) {
            if (query.limits.visible_only && !has_state(child.get(), kStateShowing)) continue;
            search(child, depth + 1, query, states, matches, visited, truncated);
            if (matches.size() >= query.max_results) return;
        }
    }

    bool matches_query(AtspiAccessible* node, const FindQuery& query,
                       const std::vector<int>& states) {
        if (query.role && string_of(f_.get_role_name, node) != *query.role) return false;
        if (query.name) {
            const std::string name = string_of(f_.get_name, node);
            switch (query.name_match) {
                case NameMatch::exact:
                    if (name != *query.name) return false;
                    break;
                case NameMatch::substring:
                    if (name.find(*query.name) == std::string::npos) return false;
                    break;
                case NameMatch::regex:
                    if (!std::regex_search(name, *query.name_regex)) return false;
                    break;
            }
        }
        for (int state : states)
            if (!has_state(node, state)) return false;
        return true;
    }

    json describe(AtspiAccessible* node) {
        json out;
        out["ref"] = hold(node);
        out["role"] = string_of(f_.get_role_name, node);
        out["name"] = string_of(f_.get_name, node);
        std::string description = string_of(f_.get_description, node);
        if (!description.empty()) out["description"] = std::move(description);
        out["states"] = state_names(node);
        if (f_.is_component(node)) {
            ErrorSlot error(f_);
            atspi::AtspiRect* rect =
                f_.component_get_extents(node, atspi::kCoordTypeScreen, error.out());
            if (rect) {
                if (rect->width > 0 && rect->height > 0)
                    out["bounds"] = {{"x", rect->x},
                                     {"y", rect->y},
                                     {"width", rect->width},
                                     {"height", rect->height}};
                f_.free(rect);
            }
        }
        if (f_.is_action(node)) {
            auto names = action_names(node);
            if (!names.empty()) out["actions"] = names;
        }
        if (f_.is_value(node)) {
            ErrorSlot error(f_);
            double value = f_.value_get_current_value(node, error.out());
            if (!error.failed()) out["value"] = value;
        }
        if (f_.is_text(node) &&
            (has_state(node, kStateEditable) || out["name"].get<std::string>().empty())) {
            ErrorSlot count_error(f_);
            int count = f_.text_get_character_count(node, count_error.out());
            if (!count_error.failed() && count >= 0) {
                ErrorSlot error(f_);
                std::string text = without_embedded_objects(utf8::to_valid(take_string(
                    f_.text_get_text(node, 0, std::min(count, kMaxTextChars), error.out()))));
                // A container's text is only its children's placeholders: nothing of its own.
                if (!text.empty() || has_state(node, kStateEditable)) {
                    out["text"] = std::move(text);
                    if (count > kMaxTextChars) out["text_truncated"] = true;
                }
            }
        }
        return out;
    }

    int child_count(AtspiAccessible* node) {
        ErrorSlot error(f_);
        int count = f_.get_child_count(node, error.out());
        return error.failed() ? 0 : count;
    }

    std::vector<std::string> action_names(AtspiAccessible* node) {
        std::vector<std::string> names;
        if (!f_.is_action(node)) return names;
        ErrorSlot error(f_);
        int n = f_.action_get_n_actions(node, error.out());
        for (int i = 0; i < n && i < 64; ++i) {
            ErrorSlot name_error(f_);
            names.push_back(take_string(f_.action_get_action_name(node, i, name_error.out())));
        }
        return names;
    }

    // press/click: the action applications name for it (GTK "click", Firefox "press", links
    // "jump", toggles "toggle"), else the element's first action.
    std::string do_default_action(AtspiAccessible* node) {
        auto names = action_names(node);
        if (names.empty())
            throw bad_request("action",
                              "the element has no actions (a click at its bounds may "
                              "still work)");
        static const char* const kPreferred[] = {"press",  "click", "activate", "jump",
                                                 "toggle", "check", "uncheck",  "open"};
        std::size_t index = 0;
        for (const char* preferred : kPreferred) {
            auto it = std::find(names.begin(), names.end(), preferred);
            if (it != names.end()) {
                index = static_cast<std::size_t>(it - names.begin());
                break;
            }
        }
        do_action(node, static_cast<int>(index));
        return names[index];
    }

    void do_action(AtspiAccessible* node, int index) {
        ErrorSlot error(f_);
        if (!f_.action_do_action(node, index, error.out())) throw failed("action", error);
    }

    void set_value(AtspiAccessible* node, const json* value) {
        if (!value) throw bad_request("value", "is required for set_value");
        if (value->is_string()) {
            if (!f_.is_editable_text(node))
                throw bad_request("value",
                                  "the element's text cannot be set (it is not "
                                  "editable text)");
            const std::string text = value->get<std::string>();
            params::require_no_nul(text, "value");
            ErrorSlot error(f_);
            if (!f_.editable_text_set_text_contents(node, text.c_str(), error.out()))
                throw failed("set_value", error);
        } else if (value->is_number()) {
            if (!f_.is_value(node))
                throw bad_request("value", "the element has no numeric value to set");
            ErrorSlot error(f_);
            if (!f_.value_set_current_value(node, value->get<double>(), error.out()))
                throw failed("set_value", error);
        } else {
            throw bad_request(
                "value", std::string("must be a string or a number, not ") + value->type_name());
        }
    }

    // An item is selected through its container's Selection interface; else its own "select".
    void select(AtspiAccessible* node) {
        ErrorSlot parent_error(f_);
        ObjectRef parent(f_, f_.get_parent(node, parent_error.out()));
        if (parent && f_.is_selection(parent.get())) {
            ErrorSlot index_error(f_);
            int index = f_.get_index_in_parent(node, index_error.out());
            ErrorSlot error(f_);
            if (index >= 0 && f_.selection_select_child(parent.get(), index, error.out())) return;
        }
        auto names = action_names(node);
        auto it = std::find(names.begin(), names.end(), "select");
        if (it == names.end())
            throw bad_request("action",
                              "the element cannot be selected (its container has no "
                              "selection and it has no \"select\" action)");
        do_action(node, static_cast<int>(it - names.begin()));
    }

    ServiceError failed(const std::string& what, const ErrorSlot& error) {
        return ServiceError(error_code::unavailable,
                            what + " failed in the application: " + error.message());
    }

    bool has_state(AtspiAccessible* node, int state) {
        void* set = f_.get_state_set(node);
        if (!set) return false;
        bool has = f_.state_set_contains(set, state) != 0;
        f_.object_unref(set);
        return has;
    }

    json state_names(AtspiAccessible* node) {
        json names = json::array();
        void* set = f_.get_state_set(node);
        if (!set) return names;
        if (atspi::GArray* states = f_.state_set_get_states(set)) {
            const int* values = reinterpret_cast<const int*>(states->data);
            for (unsigned i = 0; i < states->len; ++i) names.push_back(state_name(values[i]));
            f_.array_free(states, 1);
        }
        f_.object_unref(set);
        return names;
    }

    std::string state_name(int value) {
        if (!state_class_) state_class_ = f_.type_class_ref(f_.state_type_get_type());
        const atspi::GEnumValue* v = f_.enum_get_value(state_class_, value);
        return v && v->value_nick ? v->value_nick : "state-" + std::to_string(value);
    }

    const std::map<std::string, int>& state_values() {
        if (state_value_by_name_.empty())
            for (int v = 1; v < 128; ++v) {
                if (!state_class_) state_class_ = f_.type_class_ref(f_.state_type_get_type());
                const atspi::GEnumValue* e = f_.enum_get_value(state_class_, v);
                if (e && e->value_nick) state_value_by_name_[e->value_nick] = v;
            }
        return state_value_by_name_;
    }

    const std::set<std::string>& role_names() {
        if (role_names_.empty())
            for (int role = 0; role < 256; ++role)
                if (char* name = f_.role_get_name(role)) role_names_.insert(take_string(name));
        return role_names_;
    }

    std::string take_string(char* s) {
        if (!s) return {};
        std::string out(s);
        f_.free(s);
        return out;
    }

    std::string string_of(char* (*getter)(AtspiAccessible*, atspi::GError**),
                          AtspiAccessible* node) {
        ErrorSlot error(f_);
        return utf8::to_valid(take_string(getter(node, error.out())));
    }

    // The node's reference ("<bus name><object path>"), kept so act can find it again.
    std::string hold(AtspiAccessible* node) {
        const auto* object = static_cast<const atspi::AtspiObjectHeader*>(node);
        std::string ref =
            std::string(object->app && object->app->bus_name ? object->app->bus_name : "") +
            (object->path ? object->path : "");
        if (references_.size() >= kMaxHeldReferences && !references_.count(ref))
            references_.clear();
        if (!references_.count(ref)) references_.emplace(ref, ObjectRef(f_, f_.object_ref(node)));
        return ref;
    }

    ObjectRef resolve(const std::string& ref) {
        auto it = references_.find(ref);
        if (it == references_.end()) {
            const bool well_formed =
                ref.size() > 1 && ref[0] == ':' && ref.find('/') != std::string::npos;
            throw bad_request("ref", well_formed ? "unknown reference: not from a tree or find of "
                                                   "this sandbox, or its element is gone"
                                                 : "not a reference (\":1.23/org/a11y/atspi/"
                                                   "accessible/45\", from a tree or find)");
        }
        return it->second.share();
    }

    std::string display_name_;
    atspi::Library library_;
    const Functions& f_;
    void* main_loop_ = nullptr;
    std::thread thread_;
    std::mutex jobs_mutex_;
    std::deque<std::function<void()>> jobs_;
    // Loop thread only.
    bool connected_ = false;
    void* state_class_ = nullptr;
    std::map<std::string, int> state_value_by_name_;
    std::set<std::string> role_names_;
    std::map<std::string, ObjectRef> references_;
};

AccessibilityService::AccessibilityService(std::string display_name, FocusedPid focused_pid)
    : display_name_(std::move(display_name)), focused_pid_(std::move(focused_pid)) {}

AccessibilityService::~AccessibilityService() = default;

AccessibilityService::Engine& AccessibilityService::engine() {
    std::lock_guard lock(start_mutex_);
    if (!engine_) engine_ = std::make_unique<Engine>(display_name_);
    return *engine_;
}

json AccessibilityService::tree(const json& params) {
    const json& p =
        params::object(params, {"scope", "app", "max_depth", "max_nodes", "visible_only"});
    WalkLimits limits = read_limits(p, "focused");
    if (limits.scope == "focused" && focused_pid_) limits.focused_pid = focused_pid_();
    Engine& e = engine();
    return e.run([&] { return e.tree(limits); });
}

json AccessibilityService::find(const json& params) {
    const json& p =
        params::object(params, {"role", "name", "name_match", "states", "scope", "app", "max_depth",
                                "max_nodes", "max_results", "visible_only"});
    FindQuery query;
    query.limits = read_limits(p, "all");
    if (query.limits.scope == "focused" && focused_pid_) query.limits.focused_pid = focused_pid_();
    if (auto role = params::opt_string(p, "role")) query.role = normalize_role(*role);
    query.name = params::opt_string(p, "name");
    const std::string match = params::opt_string(p, "name_match").value_or("exact");
    if (match == "exact")
        query.name_match = NameMatch::exact;
    else if (match == "substring")
        query.name_match = NameMatch::substring;
    else if (match == "regex")
        query.name_match = NameMatch::regex;
    else
        throw bad_request("name_match", "must be \"exact\", \"substring\" or \"regex\"");
    if (query.name_match == NameMatch::regex) {
        if (!query.name) throw bad_request("name", "is required with name_match \"regex\"");
        try {
            query.name_regex.emplace(*query.name, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
            throw bad_request("name", std::string("not a valid regular expression: ") + e.what());
        }
    }
    if (const json* states = params::find(p, "states")) {
        if (!states->is_array()) throw bad_request("states", "must be an array of state names");
        for (std::size_t i = 0; i < states->size(); ++i) {
            if (!(*states)[i].is_string())
                throw bad_request("states[" + std::to_string(i) + "]", "must be a string");
            query.states.push_back(lowercase((*states)[i].get<std::string>()));
        }
    }
    query.max_results =
        static_cast<std::size_t>(params::opt_int(p, "max_results", 1, 1000).value_or(20));
    if (!query.role && !query.name && query.states.empty())
        throw bad_request("role", "give at least one of role, name and states");
    Engine& e = engine();
    return e.run([&] { return e.find(query); });
}

json AccessibilityService::act(const json& params) {
    const json& p = params::object(params, {"ref", "action", "value"});
    const std::string ref = params::req_string(p, "ref");
    const std::string action = params::req_string(p, "action");
    const json* value = params::find(p, "value");
    if (value && action != "set_value") throw bad_request("value", "only for action set_value");
    Engine& e = engine();
    return e.run([&] { return e.act(ref, action, value); });
}

}  // namespace deskbox::services
