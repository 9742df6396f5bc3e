// Input from VNC clients to the InputHandler: pointer and key events, and the clipboard
// (ClientCutText, classic and extended). View-only clients' input stops at accept_input
// (authentication.cpp).
#include <algorithm>
#include <cstring>
#include <string_view>

#include "common/utf8.hpp"
#include "streaming/vnc/server_impl.hpp"

namespace deskbox::streaming {

template <typename Call>
void VncServer::Impl::deliver(Call&& call) {
    try {
        call();
    } catch (...) {
        // Nothing to report to over RFB; the input is lost, the count says so.
        counters.input_errors.fetch_add(1);
    }
}

// ---- hooks ----

void VncServer::Impl::on_pointer(int button_mask, int x, int y, rfbClientPtr client) {
    Impl& self = of(client);
    if (!self.accept_input(client)) return;
    remember_pointer(client, x, y);
    if (self.input.pointer) self.deliver([&] { self.input.pointer(x, y, button_mask); });
}

void VncServer::Impl::on_key(rfbBool down, rfbKeySym keysym, rfbClientPtr client) {
    Impl& self = of(client);
    if (!self.accept_input(client)) return;
    if (self.input.key)
        self.deliver([&] { self.input.key(static_cast<std::uint32_t>(keysym), down != FALSE); });
}

// ---- clipboard ----

namespace {

// Cut text ends at its first NUL: the extended clipboard's text is NUL-terminated (TigerVNC
// counts the terminator in the size), and in classic cut text a NUL would end the text for the
// guest's C-string consumers anyway.
std::size_t cut_text_size(const char* text, int length) {
    auto size = static_cast<std::size_t>(std::max(0, length));
    const void* nul = std::memchr(text, '\0', size);
    return nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - text) : size;
}

}  // namespace

void VncServer::Impl::on_cut_text(char* text, int length, rfbClientPtr client) {
    Impl& self = of(client);
    if (!self.accept_input(client)) return;
    if (self.input.cut_text)
        self.deliver([&] {
            self.input.cut_text(
                utf8::from_latin1(std::string_view(text, cut_text_size(text, length))));
        });
}

void VncServer::Impl::on_cut_text_utf8(char* text, int length, rfbClientPtr client) {
    Impl& self = of(client);
    if (!self.accept_input(client)) return;
    if (self.input.cut_text)
        // UTF-8 only by the client's word; the JSON call to the guest would refuse anything else.
        self.deliver([&] {
            self.input.cut_text(
                utf8::to_valid(std::string_view(text, cut_text_size(text, length))));
        });
}

}  // namespace deskbox::streaming
