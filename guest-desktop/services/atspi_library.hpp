// libatspi (and the GLib it brings), opened with dlopen the first time the accessibility
// methods are used. The agent binary is bind-mounted into every template and the `minimal`
// template has no libatspi, so the agent must load without it and say so when asked.
//
// Only what the accessibility service calls is resolved. The types are opaque pointers; the
// few structures read directly (GError, GArray, GEnumValue, AtspiRect, AtspiObject's app and
// path) are the public, stable layouts of GLib 2 and libatspi 2 headers, declared here so
// building the agent needs no libatspi headers either.
#pragma once

#include <memory>
#include <string>

namespace deskbox::services::atspi {

using gboolean = int;
using AtspiAccessible = void;

struct GError {
    unsigned int domain;
    int code;
    char* message;
};
struct GArray {
    char* data;
    unsigned int len;
};
struct GEnumValue {
    int value;
    const char* value_name;
    const char* value_nick;
};
struct AtspiRect {
    int x, y, width, height;
};
// atspi-object.h / atspi-application.h: the D-Bus address of an accessible.
struct GObjectHeader {
    void* g_class;
    unsigned int ref_count;
    void* qdata;
};
struct AtspiApplicationHeader {
    GObjectHeader parent;
    void* hash;
    char* bus_name;
};
struct AtspiObjectHeader {
    GObjectHeader parent;
    AtspiApplicationHeader* app;
    char* path;
};

inline constexpr int kCoordTypeScreen = 0;  // ATSPI_COORD_TYPE_SCREEN

struct Functions {
    // libatspi
    int (*init)();
    int (*exit)();
    AtspiAccessible* (*get_desktop)(int);
    int (*get_child_count)(AtspiAccessible*, GError**);
    AtspiAccessible* (*get_child_at_index)(AtspiAccessible*, int, GError**);
    AtspiAccessible* (*get_parent)(AtspiAccessible*, GError**);
    int (*get_index_in_parent)(AtspiAccessible*, GError**);
    char* (*get_name)(AtspiAccessible*, GError**);
    char* (*get_description)(AtspiAccessible*, GError**);
    char* (*get_role_name)(AtspiAccessible*, GError**);
    int (*get_process_id)(AtspiAccessible*, GError**);
    char* (*role_get_name)(int);
    void* (*get_state_set)(AtspiAccessible*);
    GArray* (*state_set_get_states)(void*);
    gboolean (*state_set_contains)(void*, int);
    unsigned long (*state_type_get_type)();
    gboolean (*is_action)(AtspiAccessible*);
    gboolean (*is_component)(AtspiAccessible*);
    gboolean (*is_text)(AtspiAccessible*);
    gboolean (*is_editable_text)(AtspiAccessible*);
    gboolean (*is_value)(AtspiAccessible*);
    gboolean (*is_selection)(AtspiAccessible*);
    AtspiRect* (*component_get_extents)(AtspiAccessible*, int, GError**);
    gboolean (*component_grab_focus)(AtspiAccessible*, GError**);
    int (*action_get_n_actions)(AtspiAccessible*, GError**);
    char* (*action_get_action_name)(AtspiAccessible*, int, GError**);
    gboolean (*action_do_action)(AtspiAccessible*, int, GError**);
    int (*text_get_character_count)(AtspiAccessible*, GError**);
    char* (*text_get_text)(AtspiAccessible*, int, int, GError**);
    gboolean (*editable_text_set_text_contents)(AtspiAccessible*, const char*, GError**);
    double (*value_get_current_value)(AtspiAccessible*, GError**);
    gboolean (*value_set_current_value)(AtspiAccessible*, double, GError**);
    gboolean (*selection_select_child)(AtspiAccessible*, int, GError**);
    // GLib / GObject (libatspi's dependencies, found through its handle)
    void* (*object_ref)(void*);
    void (*object_unref)(void*);
    void (*free)(void*);
    void (*error_free)(GError*);
    char* (*array_free)(GArray*, gboolean);
    void* (*type_class_ref)(unsigned long);
    GEnumValue* (*enum_get_value)(void*, int);
    void* (*main_loop_new)(void*, gboolean);
    void (*main_loop_run)(void*);
    void (*main_loop_quit)(void*);
    void (*main_loop_unref)(void*);
    unsigned int (*idle_add)(gboolean (*)(void*), void*);
};

class Library {
  public:
    // Opens it. Throws ServiceError(unavailable) "this template has no accessibility support:
    // libatspi not installed" when the library (or a function of it) is missing.
    Library();

    const Functions& fn() const { return fn_; }

  private:
    struct Closer {
        void operator()(void* handle) const;
    };
    std::unique_ptr<void, Closer> handle_;
    Functions fn_{};
};

}  // namespace deskbox::services::atspi
