// VNC authentication: the control and view-only passwords, the DES challenge check, and the gate
// that keeps view-only clients' input from the InputHandler.
#include <algorithm>
#include <cstring>

#include "streaming/vnc/server_impl.hpp"

namespace deskbox::streaming {

namespace {

VncPasswordKey password_key(const std::string& password) {
    VncPasswordKey key{};
    std::memcpy(key.data(), password.data(),
                std::min<std::size_t>(password.size(), kVncPasswordChars));
    return key;
}

bool constant_time_equal(const unsigned char* a, const unsigned char* b, std::size_t size) {
    unsigned char difference = 0;
    for (std::size_t i = 0; i < size; ++i) difference |= a[i] ^ b[i];
    return difference == 0;
}

}  // namespace

void VncServer::Impl::check_passwords() {
    if (options.password.empty())
        throw ParameterError("password", "must not be empty (VNC authentication is required)");
    if (options.password.find('\0') != std::string::npos)
        throw ParameterError("password", "must not contain NUL characters");
    if (options.view_only_password.find('\0') != std::string::npos)
        throw ParameterError("view_only_password", "must not contain NUL characters");
    control_key = password_key(options.password);
    has_view_only = !options.view_only_password.empty();
    if (has_view_only) {
        view_only_key = password_key(options.view_only_password);
        if (view_only_key == control_key)
            throw ParameterError("view_only_password",
                                 "must differ from password in its first 8 characters (VNC "
                                 "authentication ignores the rest)");
    }
}

// ---- hooks ----

rfbBool VncServer::Impl::on_password(rfbClientPtr client, const char* response, int length) {
    Impl& self = of(client);
    ClientState& client_state = state(client);
    auto matches = [&](VncPasswordKey& key) {
        if (length != CHALLENGESIZE) return false;
        unsigned char expected[CHALLENGESIZE];
        std::memcpy(expected, client->authChallenge, CHALLENGESIZE);
        rfbEncryptBytes(expected, key.data());
        return constant_time_equal(expected, reinterpret_cast<const unsigned char*>(response),
                                   CHALLENGESIZE);
    };
    if (matches(self.control_key)) {
        client_state.authenticated = true;
        client_state.view_only = false;
        self.counters.control_logins.fetch_add(1);
        return TRUE;
    }
    if (self.has_view_only && matches(self.view_only_key)) {
        client_state.authenticated = true;
        client_state.view_only = true;
        self.counters.view_only_logins.fetch_add(1);
        return TRUE;
    }
    self.counters.failed_logins.fetch_add(1);
    return FALSE;
}

bool VncServer::Impl::accept_input(rfbClientPtr client) {
    ClientState& client_state = state(client);
    if (client_state.authenticated && !client_state.view_only) {
        counters.input_events.fetch_add(1);
        return true;
    }
    counters.ignored_input.fetch_add(1);
    // libvncserver lets the client holding a button own the pointer; a spectator must not
    // lock out the controlling client that way.
    if (client->screen->pointerClient == client) client->screen->pointerClient = nullptr;
    return false;
}

}  // namespace deskbox::streaming
