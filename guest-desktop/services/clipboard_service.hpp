// clipboard.get / clipboard.set through the X selection protocol (ICCCM), so any X client
// (xterm, GTK, Qt, xclip) pastes what we set and we read what they copied.
//
// set() makes an owner window (own connection, own thread) the owner of CLIPBOARD and, by
// default, PRIMARY (Shift+Insert and middle click in xterm paste PRIMARY). It answers
// SelectionRequest for TARGETS, TIMESTAMP, UTF8_STRING, TEXT, text/plain;charset=utf-8 and
// STRING (Latin-1, other characters as '?'), with INCR for texts bigger than one request,
// until another client takes the selection.
// get() converts the selection to UTF8_STRING (fallback STRING) and follows INCR transfers.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "guest-desktop/services/service_error.hpp"

namespace deskbox::x11 {
class XConnection;
}
namespace deskbox::services {

struct ClipboardOptions {
    // Longest wait for the selection owner's next answer (each INCR chunk restarts it).
    std::chrono::milliseconds timeout{5000};
    std::size_t max_bytes = std::size_t{64} << 20;
};

class ClipboardService {
  public:
    // Connects lazily, and again after the X server was restarted.
    explicit ClipboardService(std::string display_name, ClipboardOptions options = {});
    ~ClipboardService();
    ClipboardService(const ClipboardService&) = delete;
    ClipboardService& operator=(const ClipboardService&) = delete;

    // {"selection"?:"clipboard"|"primary"} → {"text"}; "" when nobody owns it or the owner
    // offers no text. Throws ServiceError timeout if the owner does not answer in time.
    nlohmann::json get(const nlohmann::json& params = nullptr);
    // {"text","selection"?:"clipboard"|"primary"|"both" (default)} → {}, once we own it.
    nlohmann::json set(const nlohmann::json& params);

  private:
    class Owner;
    ClipboardOptions options_;
    std::string display_name_;
    std::mutex get_mutex_;
    std::unique_ptr<x11::XConnection> requester_;
    std::mutex set_mutex_;
    std::unique_ptr<Owner> owner_;
};

}  // namespace deskbox::services
