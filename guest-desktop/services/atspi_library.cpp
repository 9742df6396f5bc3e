#include "guest-desktop/services/atspi_library.hpp"

#include <dlfcn.h>

#include "guest-desktop/services/service_error.hpp"

namespace deskbox::services::atspi {

namespace {

const char* const kNotInstalled =
    "this template has no accessibility support: libatspi not installed";

template <typename F>
void resolve(void* handle, F& slot, const char* symbol) {
    void* address = ::dlsym(handle, symbol);
    if (!address)
        throw ServiceError(error_code::accessibility_unavailable,
                           std::string(kNotInstalled) + " (libatspi lacks " + symbol + ")");
    slot = reinterpret_cast<F>(address);
}

}  // namespace

Library::Library()
    // RTLD_NODELETE: GLib starts threads and registers types that must outlive a dlclose, so
    // closing the handle only drops the reference.
    : handle_(::dlopen("libatspi.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)) {
    if (!handle_) throw ServiceError(error_code::accessibility_unavailable, kNotInstalled);
    void* handle = handle_.get();
    Functions& f = fn_;
    resolve(handle, f.init, "atspi_init");
    resolve(handle, f.exit, "atspi_exit");
    resolve(handle, f.get_desktop, "atspi_get_desktop");
    resolve(handle, f.get_child_count, "atspi_accessible_get_child_count");
    resolve(handle, f.get_child_at_index, "atspi_accessible_get_child_at_index");
    resolve(handle, f.get_parent, "atspi_accessible_get_parent");
    resolve(handle, f.get_index_in_parent, "atspi_accessible_get_index_in_parent");
    resolve(handle, f.get_name, "atspi_accessible_get_name");
    resolve(handle, f.get_description, "atspi_accessible_get_description");
    resolve(handle, f.get_role_name, "atspi_accessible_get_role_name");
    resolve(handle, f.get_process_id, "atspi_accessible_get_process_id");
    resolve(handle, f.role_get_name, "atspi_role_get_name");
    resolve(handle, f.get_state_set, "atspi_accessible_get_state_set");
    resolve(handle, f.state_set_get_states, "atspi_state_set_get_states");
    resolve(handle, f.state_set_contains, "atspi_state_set_contains");
    resolve(handle, f.state_type_get_type, "atspi_state_type_get_type");
    resolve(handle, f.is_action, "atspi_accessible_is_action");
    resolve(handle, f.is_component, "atspi_accessible_is_component");
    resolve(handle, f.is_text, "atspi_accessible_is_text");
    resolve(handle, f.is_editable_text, "atspi_accessible_is_editable_text");
    resolve(handle, f.is_value, "atspi_accessible_is_value");
    resolve(handle, f.is_selection, "atspi_accessible_is_selection");
    resolve(handle, f.component_get_extents, "atspi_component_get_extents");
    resolve(handle, f.component_grab_focus, "atspi_component_grab_focus");
    resolve(handle, f.action_get_n_actions, "atspi_action_get_n_actions");
    resolve(handle, f.action_get_action_name, "atspi_action_get_action_name");
    resolve(handle, f.action_do_action, "atspi_action_do_action");
    resolve(handle, f.text_get_character_count, "atspi_text_get_character_count");
    resolve(handle, f.text_get_text, "atspi_text_get_text");
    resolve(handle, f.editable_text_set_text_contents, "atspi_editable_text_set_text_contents");
    resolve(handle, f.value_get_current_value, "atspi_value_get_current_value");
    resolve(handle, f.value_set_current_value, "atspi_value_set_current_value");
    resolve(handle, f.selection_select_child, "atspi_selection_select_child");
    resolve(handle, f.object_ref, "g_object_ref");
    resolve(handle, f.object_unref, "g_object_unref");
    resolve(handle, f.free, "g_free");
    resolve(handle, f.error_free, "g_error_free");
    resolve(handle, f.array_free, "g_array_free");
    resolve(handle, f.type_class_ref, "g_type_class_ref");
    resolve(handle, f.enum_get_value, "g_enum_get_value");
    resolve(handle, f.main_loop_new, "g_main_loop_new");
    resolve(handle, f.main_loop_run, "g_main_loop_run");
    resolve(handle, f.main_loop_quit, "g_main_loop_quit");
    resolve(handle, f.main_loop_unref, "g_main_loop_unref");
    resolve(handle, f.idle_add, "g_idle_add");
}

void Library::Closer::operator()(void* handle) const {
    ::dlclose(handle);
}

}  // namespace deskbox::services::atspi
