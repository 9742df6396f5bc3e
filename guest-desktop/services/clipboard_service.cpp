#include "guest-desktop/services/clipboard_service.hpp"

#include <X11/Xatom.h>
#include <X11/Xutil.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <condition_variable>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "common/utf8.hpp"
#include "guest-desktop/services/params.hpp"
#include "guest-desktop/services/text.hpp"
#include "guest-desktop/services/x_display.hpp"
#include "x11/error_trap.hpp"
#include "x11/properties.hpp"

namespace deskbox::services {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using x11::get_property;
using x11::XConnection;
using x11::XErrorTrap;

namespace {

struct ClipboardAtoms {
    Atom clipboard, primary, targets, timestamp, utf8_string, text, text_plain_utf8, incr, multiple,
        transfer;
    explicit ClipboardAtoms(x11::AtomCache& cache) {
        auto a =
            cache.intern({"CLIPBOARD", "PRIMARY", "TARGETS", "TIMESTAMP", "UTF8_STRING", "TEXT",
                          "text/plain;charset=utf-8", "INCR", "MULTIPLE", "DESKBOX_SELECTION"});
        clipboard = a[0], primary = a[1], targets = a[2], timestamp = a[3], utf8_string = a[4];
        text = a[5], text_plain_utf8 = a[6], incr = a[7], multiple = a[8], transfer = a[9];
    }
};

// Waits until `fd` is readable or the deadline passes. False on timeout.
bool wait_readable(int fd, Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    return ::poll(&pfd, 1, static_cast<int>(left.count()) + 1) > 0;
}

// Next event for which `match` holds, leaving others queued; nullopt on timeout or a dead
// connection.
template <typename Match>
std::optional<XEvent> wait_event(XConnection& conn, Clock::time_point deadline, Match match) {
    Display* d = conn.get();
    while (!conn.broken()) {
        XEvent ev;
        auto predicate = [](Display*, XEvent* e, XPointer arg) -> Bool {
            return (*reinterpret_cast<Match*>(arg))(*e) ? True : False;
        };
        if (XCheckIfEvent(d, &ev, predicate, reinterpret_cast<XPointer>(&match))) return ev;
        if (Clock::now() >= deadline) return std::nullopt;
        XFlush(d);
        if (XPending(d) > 0) continue;  // events read meanwhile; check them first
        wait_readable(ConnectionNumber(d), deadline);
        XEventsQueued(d, QueuedAfterReading);
    }
    return std::nullopt;
}

Atom selection_atom(const std::string& name, const ClipboardAtoms& atoms) {
    return name == "primary" ? atoms.primary : atoms.clipboard;
}

// INCR: the owner sends a large selection in chunks, each after the requestor deletes the
// previous one (the delete of the INCR property itself starts it); an empty chunk ends it. Its
// type is the first chunk's. Throws timeout or too_large; returns what it has when the
// connection breaks (the caller checks).
struct Received {
    Atom type = None;
    std::string bytes;
};
Received receive_incremental(XConnection& conn, Window window, Atom property,
                             const ClipboardOptions& options) {
    Received received;
    while (true) {
        auto ev =
            wait_event(conn, Clock::now() + options.timeout, [window, property](const XEvent& e) {
                return e.type == PropertyNotify && e.xproperty.window == window &&
                       e.xproperty.atom == property && e.xproperty.state == PropertyNewValue;
            });
        if (conn.broken()) return received;
        if (!ev)
            throw ServiceError(error_code::timeout,
                               "the clipboard owner stopped sending a large text");
        auto chunk = get_property(conn.get(), window, property, AnyPropertyType, true);
        if (!chunk || chunk->bytes.empty()) return received;
        if (received.type == None) received.type = chunk->type;
        received.bytes += chunk->bytes;
        if (received.bytes.size() > options.max_bytes)
            throw ServiceError(
                error_code::too_large,
                "the clipboard holds more than " + std::to_string(options.max_bytes) + " bytes");
    }
}

}  // namespace

// Owns the selections: one connection and window, served by one thread until destroyed.
class ClipboardService::Owner {
  public:
    Owner(const std::string& display_name, std::chrono::milliseconds timeout)
        : connection_(open_display(display_name)), atoms_(connection_->atoms()), timeout_(timeout) {
        Display* d = connection_->get();
        XSetWindowAttributes attrs{};
        attrs.event_mask = PropertyChangeMask;
        window_ = XCreateWindow(d, DefaultRootWindow(d), -10, -10, 1, 1, 0, CopyFromParent,
                                InputOnly, CopyFromParent, CWEventMask, &attrs);
        XStoreName(d, window_, "deskbox clipboard");
        // Chunks stay well under one request (XMaxRequestSize counts 4-byte units).
        chunk_ = std::clamp<std::size_t>(static_cast<std::size_t>(XMaxRequestSize(d)) * 4 - 1024,
                                         4096, 256 * 1024);
        XFlush(d);
        wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        thread_ = std::thread([this] { serve(); });
    }

    ~Owner() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake();
        thread_.join();
        if (connection_) {  // still alive (serve() drops a broken one itself)
            XDestroyWindow(connection_->get(), window_);
            XFlush(connection_->get());
        }
    }

    bool dead() {
        std::lock_guard lock(mutex_);
        return dead_;
    }

    // Takes the selections; returns an error message or "".
    std::string set(std::string text, std::vector<Atom> selections) {
        std::unique_lock lock(mutex_);
        if (dead_) return "lost the connection to the X display";
        request_ = Request{std::move(text), std::move(selections), ++request_serial_};
        std::uint64_t serial = request_serial_;
        lock.unlock();
        wake();
        lock.lock();
        // The thread's own steps are bounded by timeout_; this only guards against its death.
        bool answered = done_.wait_for(lock, timeout_ * 2 + std::chrono::seconds(1),
                                       [&] { return answered_serial_ >= serial || dead_; });
        if (!answered) return "timed out taking the selection";
        if (answered_serial_ < serial) return "lost the connection to the X display";
        return answer_;
    }

    const ClipboardAtoms& atoms() const { return atoms_; }

  private:
    struct Request {
        std::string text;
        std::vector<Atom> selections;
        std::uint64_t serial;
    };
    struct Transfer {  // an INCR transfer to one requestor
        Window requestor;
        Atom property;
        Atom type;
        std::string data;
        std::size_t offset = 0;
        Clock::time_point last_progress;
    };

    void wake() {
        std::uint64_t one = 1;
        (void)!::write(wake_.get(), &one, sizeof one);
    }

    void serve() {
        Display* d = connection_->get();
        while (true) {
            std::optional<Request> request;
            {
                std::lock_guard lock(mutex_);
                if (stopping_) break;
                request.swap(request_);
            }
            if (request) take_ownership(*request);
            while (!connection_->broken() && XPending(d) > 0) {
                XEvent ev;
                XNextEvent(d, &ev);
                handle(ev);
            }
            if (connection_->broken()) break;
            expire_transfers();
            XFlush(d);
            pollfd fds[2] = {{ConnectionNumber(d), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
            ::poll(fds, 2, transfers_.empty() ? -1 : 1000);
            if (fds[1].revents) {
                std::uint64_t count;
                (void)!::read(wake_.get(), &count, sizeof count);
            }
        }
        std::lock_guard lock(mutex_);
        if (connection_->broken()) {
            // Closed here: only the thread that saw the IO error can still close it cleanly.
            connection_.reset();
            dead_ = true;
        }
        done_.notify_all();
    }

    void answer(std::uint64_t serial, std::string error) {
        std::lock_guard lock(mutex_);
        answered_serial_ = serial;
        answer_ = std::move(error);
        done_.notify_all();
    }

    void take_ownership(Request& request) {
        Display* d = connection_->get();
        // ICCCM: own with a real server timestamp, got from a zero-length property append.
        XChangeProperty(d, window_, atoms_.transfer, XA_STRING, 8, PropModeAppend, nullptr, 0);
        XFlush(d);
        Window w = window_;
        Atom a = atoms_.transfer;
        auto ev = wait_event(*connection_, Clock::now() + timeout_, [w, a](const XEvent& e) {
            return e.type == PropertyNotify && e.xproperty.window == w && e.xproperty.atom == a;
        });
        if (!ev) return answer(request.serial, "the X server did not answer in time");
        Time time = ev->xproperty.time;
        for (Atom selection : request.selections) {
            XSetSelectionOwner(d, selection, window_, time);
            if (XGetSelectionOwner(d, selection) != window_)
                return answer(request.serial, "another client kept the selection");
        }
        text_ = std::move(request.text);
        timestamp_ = time;
        owned_.clear();
        owned_.insert(request.selections.begin(), request.selections.end());
        transfers_.clear();
        answer(request.serial, "");
    }

    void handle(const XEvent& ev) {
        if (ev.type == SelectionRequest) {
            serve_request(ev.xselectionrequest);
        } else if (ev.type == SelectionClear && ev.xselectionclear.window == window_) {
            owned_.erase(ev.xselectionclear.selection);
            if (owned_.empty()) {
                text_.clear();
                text_.shrink_to_fit();  // a 50 MB paste should not stay resident
            }
        } else if (ev.type == PropertyNotify && ev.xproperty.state == PropertyDelete) {
            continue_transfer(ev.xproperty.window, ev.xproperty.atom);
        }
    }

    void serve_request(const XSelectionRequestEvent& req) {
        Display* d = connection_->get();
        XErrorTrap trap(d);  // the requestor may be gone already
        XEvent reply{};
        reply.xselection.type = SelectionNotify;
        reply.xselection.display = d;
        reply.xselection.requestor = req.requestor;
        reply.xselection.selection = req.selection;
        reply.xselection.target = req.target;
        reply.xselection.time = req.time;
        reply.xselection.property = None;
        // Obsolete clients pass None: ICCCM says use the target as the property.
        Atom property = req.property == None ? req.target : req.property;
        bool owned =
            owned_.count(req.selection) && (req.time == CurrentTime || req.time >= timestamp_);
        if (owned) {
            const ClipboardAtoms& a = atoms_;
            if (req.target == a.targets) {
                long targets[] = {
                    static_cast<long>(a.targets),         static_cast<long>(a.timestamp),
                    static_cast<long>(a.utf8_string),     static_cast<long>(a.text),
                    static_cast<long>(a.text_plain_utf8), static_cast<long>(XA_STRING)};
                XChangeProperty(d, req.requestor, property, XA_ATOM, 32, PropModeReplace,
                                reinterpret_cast<unsigned char*>(targets), std::size(targets));
                reply.xselection.property = property;
            } else if (req.target == a.timestamp) {
                long time = static_cast<long>(timestamp_);
                XChangeProperty(d, req.requestor, property, XA_INTEGER, 32, PropModeReplace,
                                reinterpret_cast<unsigned char*>(&time), 1);
                reply.xselection.property = property;
            } else if (req.target == a.utf8_string || req.target == a.text ||
                       req.target == a.text_plain_utf8 || req.target == XA_STRING) {
                bool latin1 = req.target == XA_STRING;
                // TEXT lets the owner pick the encoding; UTF8_STRING is the one that is exact.
                Atom type = latin1                            ? XA_STRING
                            : req.target == a.text_plain_utf8 ? a.text_plain_utf8
                                                              : a.utf8_string;
                send_text(req.requestor, property, type,
                          latin1 ? text::utf8_to_latin1(text_) : text_);
                reply.xselection.property = property;
            }
        }
        XSendEvent(d, req.requestor, False, NoEventMask, &reply);
        // The trap syncs as it goes: a requestor gone meanwhile is no error of ours.
    }

    void send_text(Window requestor, Atom property, Atom type, std::string data) {
        Display* d = connection_->get();
        if (data.size() <= chunk_) {
            XChangeProperty(d, requestor, property, type, 8, PropModeReplace,
                            reinterpret_cast<const unsigned char*>(data.data()),
                            static_cast<int>(data.size()));
            return;
        }
        // INCR: announce the size; each time the requestor deletes the property, send a chunk.
        XSelectInput(d, requestor, PropertyChangeMask);
        long size = static_cast<long>(data.size());
        XChangeProperty(d, requestor, property, atoms_.incr, 32, PropModeReplace,
                        reinterpret_cast<unsigned char*>(&size), 1);
        std::erase_if(transfers_, [&](const Transfer& t) {
            return t.requestor == requestor && t.property == property;
        });
        transfers_.push_back(Transfer{requestor, property, type, std::move(data), 0, Clock::now()});
    }

    void continue_transfer(Window requestor, Atom property) {
        auto it = std::find_if(transfers_.begin(), transfers_.end(), [&](const Transfer& t) {
            return t.requestor == requestor && t.property == property;
        });
        if (it == transfers_.end()) return;
        Display* d = connection_->get();
        XErrorTrap trap(d);
        std::size_t n = std::min(chunk_, it->data.size() - it->offset);
        // The last chunk is empty: that tells the requestor the transfer is complete.
        XChangeProperty(d, requestor, property, it->type, 8, PropModeReplace,
                        reinterpret_cast<const unsigned char*>(it->data.data() + it->offset),
                        static_cast<int>(n));
        it->offset += n;
        it->last_progress = Clock::now();
        if (n == 0 || trap.sync_and_check()) finish_transfer(it);
    }

    void finish_transfer(std::vector<Transfer>::iterator it) {
        Window requestor = it->requestor;
        transfers_.erase(it);
        bool still_used = std::any_of(transfers_.begin(), transfers_.end(),
                                      [&](const Transfer& t) { return t.requestor == requestor; });
        if (!still_used) {
            XErrorTrap trap(connection_->get());
            XSelectInput(connection_->get(), requestor, NoEventMask);
        }
    }

    // A requestor that stopped deleting the property (crashed, gave up) is dropped.
    void expire_transfers() {
        auto now = Clock::now();
        for (auto it = transfers_.begin(); it != transfers_.end();) {
            if (now - it->last_progress > timeout_ * 2) {
                finish_transfer(it);
                it = transfers_.begin();
            } else {
                ++it;
            }
        }
    }

    std::unique_ptr<XConnection> connection_;
    ClipboardAtoms atoms_;
    std::chrono::milliseconds timeout_;
    Window window_ = None;
    std::size_t chunk_ = 0;
    UniqueFd wake_;

    // Owned by the serving thread.
    std::string text_;
    Time timestamp_ = CurrentTime;
    std::set<Atom> owned_;
    std::vector<Transfer> transfers_;

    std::mutex mutex_;
    std::condition_variable done_;
    std::optional<Request> request_;
    std::uint64_t request_serial_ = 0;
    std::uint64_t answered_serial_ = 0;
    std::string answer_;
    bool stopping_ = false;
    bool dead_ = false;
    std::thread thread_;  // last: starts after everything above exists
};

ClipboardService::ClipboardService(std::string display_name, ClipboardOptions options)
    : options_(options), display_name_(std::move(display_name)) {}

ClipboardService::~ClipboardService() = default;

json ClipboardService::set(const json& params) {
    const json& p = params::object(params, {"text", "selection"});
    std::string text = params::req_string(p, "text");
    std::string which = params::opt_string(p, "selection").value_or("both");
    if (which != "clipboard" && which != "primary" && which != "both")
        throw bad_request("selection", "must be \"clipboard\", \"primary\" or \"both\"");
    if (text.size() > options_.max_bytes)
        throw ServiceError(error_code::too_large,
                           "text: " + std::to_string(text.size()) +
                               " bytes is more than the limit of " +
                               std::to_string(options_.max_bytes),
                           "text");
    std::lock_guard lock(set_mutex_);
    if (owner_ && owner_->dead()) owner_.reset();
    if (!owner_) owner_ = std::make_unique<Owner>(display_name_, options_.timeout);
    const ClipboardAtoms& atoms = owner_->atoms();
    std::vector<Atom> selections;
    if (which != "primary") selections.push_back(atoms.clipboard);
    if (which != "clipboard") selections.push_back(atoms.primary);
    std::string error = owner_->set(std::move(text), selections);
    if (!error.empty()) {
        if (owner_->dead()) owner_.reset();
        throw ServiceError(error.find("timed out") != std::string::npos ? error_code::timeout
                                                                        : error_code::unavailable,
                           "cannot set the clipboard: " + error);
    }
    return json::object();
}

json ClipboardService::get(const json& params) {
    const json& p = params::object(params, {"selection"});
    std::string which = params::opt_string(p, "selection").value_or("clipboard");
    if (which != "clipboard" && which != "primary")
        throw bad_request("selection", "must be \"clipboard\" or \"primary\"");

    std::lock_guard lock(get_mutex_);
    XConnection& conn = live_display(requester_, display_name_);
    Display* d = conn.get();
    ClipboardAtoms atoms(conn.atoms());
    Atom selection = selection_atom(which, atoms);
    auto lost = [&] {
        requester_.reset();
        return ServiceError(error_code::unavailable,
                            "lost the connection to X display " + display_name_);
    };

    XSync(d, True);  // drop events left over from an abandoned earlier transfer
    Window owner = XGetSelectionOwner(d, selection);
    if (conn.broken()) throw lost();
    if (owner == None) return {{"text", ""}};

    // A fresh window per call: nothing stale can be mistaken for this transfer's events.
    XSetWindowAttributes attrs{};
    attrs.event_mask = PropertyChangeMask;
    Window window = XCreateWindow(d, DefaultRootWindow(d), -10, -10, 1, 1, 0, CopyFromParent,
                                  InputOnly, CopyFromParent, CWEventMask, &attrs);
    struct WindowGuard {
        XConnection& conn;
        Window w;
        ~WindowGuard() {
            if (!conn.broken()) {
                XDestroyWindow(conn.get(), w);
                XFlush(conn.get());
            }
        }
    } guard{conn, window};
    Atom property = atoms.transfer;

    for (Atom target : {atoms.utf8_string, static_cast<Atom>(XA_STRING)}) {
        XConvertSelection(d, selection, target, property, window, CurrentTime);
        XFlush(d);
        auto notify = wait_event(conn, Clock::now() + options_.timeout, [window](const XEvent& e) {
            return e.type == SelectionNotify && e.xselection.requestor == window;
        });
        if (conn.broken()) throw lost();
        if (!notify)
            throw ServiceError(error_code::timeout, "the clipboard owner did not answer within " +
                                                        std::to_string(options_.timeout.count()) +
                                                        " ms");
        if (notify->xselection.property == None) continue;  // refused this target

        auto value = get_property(d, window, property, AnyPropertyType, true);
        if (!value) continue;
        std::string data;
        Atom type = value->type;
        if (value->type == atoms.incr) {
            auto received = receive_incremental(conn, window, property, options_);
            if (conn.broken()) throw lost();
            type = received.type;
            data = std::move(received.bytes);
        } else {
            data = std::move(value->bytes);
        }
        if (data.size() > options_.max_bytes)
            throw ServiceError(
                error_code::too_large,
                "the clipboard holds more than " + std::to_string(options_.max_bytes) + " bytes");
        std::string out = type == XA_STRING ? utf8::from_latin1(data) : utf8::to_valid(data);
        return {{"text", std::move(out)}};
    }
    if (conn.broken()) throw lost();
    return {{"text", ""}};
}

}  // namespace deskbox::services
