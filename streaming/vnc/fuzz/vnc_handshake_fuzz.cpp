// libFuzzer target for deskbox's VNC server (streaming/vnc/vnc_server.hpp) as a client meets it
// over TCP: the RFB handshake and the client messages after it, parsed by libvncserver and
// answered through our hooks (authentication, input, display, cursor, clipboard).
//
// Input: the bytes a client sends, as they go on the wire, with one exception. VNC authentication
// answers a random challenge, so where the 16-byte response would be, the input holds the 8-byte
// password the client types, and the harness encrypts the server's challenge with it the way a
// real client does. Where that slot is follows from the input's ProtocolVersion as libvncserver
// reads it: 3.3 to 3.6 right after it (the server names the security type), 3.7 and later after
// a security type choice of 2. The harness sends up to the slot, waits for the challenge, sends
// the response and the rest, half-closes, and reads what the server sends until it closes (or
// 200 ms of silence, 2 s at most). It reads all the while, so a server sending many updates never
// blocks on a full socket. What the server owes at once (its ProtocolVersion, the challenge, and
// for the check below the whole handshake) it gets up to 10 s of silence for: a machine busy
// with other work can hold its thread off for a few hundred milliseconds, and 200 ms there made
// a slow but correct server look stuck (and the conversation end before the server had even
// accepted it, so "the connection is gone" held without checking anything). make_corpus.py
// writes the seeds.
//
// Beyond "no crash, no sanitizer report" it checks:
//   - the server sends its ProtocolVersion first, whatever the input (else its thread is stuck);
//   - the connection is gone from the server when the conversation ends (clients() back to 0);
//   - input reaches the InputHandler only from a client that logged in with the control password;
//   - cut text handed to the InputHandler is valid UTF-8 without NUL;
//   - on the first input and every 64th: a fresh well-formed client still completes the
//     handshake and gets a ServerInit with the fake screen's size and name, no connection was
//     refused, and the process's descriptors stay bounded.
// The seed corpus is replayed by vnc_corpus_tests (tests/streaming/vnc/vnc_corpus_test.cpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <rfb/rfb.h>  // rfbEncryptBytes and the protocol's constants, with C linkage

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "streaming/frame_mirror.hpp"
#include "streaming/vnc/vnc_server.hpp"

namespace deskbox::streaming::vnc_fuzz {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kWidth = 64;  // the fake screen
constexpr int kHeight = 48;
constexpr char kDesktopName[] = "deskbox-fuzz";
constexpr char kControlPassword[] = "fuzz-ctl";  // 8 characters: all VNC authentication uses
constexpr char kViewPassword[] = "fuzz-viw";
constexpr std::size_t kPasswordSlot = 8;  // input bytes that stand for the 16-byte response
constexpr std::size_t kVersionSize = 12;  // "RFB 003.008\n"
constexpr std::size_t kChallengeSize = 16;
constexpr auto kSilence = 200ms;        // the server said nothing for this long: done
constexpr auto kConversation = 2s;      // a conversation never takes longer, but for...
constexpr auto kReplyWait = 10s;        // ...silence while the server owes a reply: stuck
constexpr auto kClientGoneWait = 6s;    // > libvncserver's 5 s client timeout
constexpr unsigned kCheckEvery = 64;    // inputs between checks that the server still serves
constexpr std::size_t kFdSlack = 32;    // descriptors libFuzzer itself may open meanwhile
constexpr std::size_t kKeep = 1 << 20;  // received bytes kept for the caller

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "vnc fuzz invariant broken: %s\n", what);
    std::abort();
}

bool valid_utf8(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size()) {
        auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = 0;
        if (c < 0x80)
            length = 1;
        else if ((c >> 5) == 0x6)
            length = 2;
        else if ((c >> 4) == 0xE)
            length = 3;
        else if ((c >> 3) == 0x1E)
            length = 4;
        if (length == 0 || i + length > text.size()) return false;
        std::uint32_t code = length == 1 ? c : c & (0x7F >> length);
        for (std::size_t k = 1; k < length; ++k) {
            auto next = static_cast<unsigned char>(text[i + k]);
            if ((next & 0xC0) != 0x80) return false;
            code = code << 6 | (next & 0x3F);
        }
        static constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
        if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
            return false;  // overlong, beyond Unicode, or a surrogate
        i += length;
    }
    return true;
}

std::size_t open_fds() {
    std::size_t count = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
        ++count;
    return count;
}

// The server under test with its screen: a patterned 64x48 frame and a small cursor, so the
// cursor paths (rich cursor, pointer position, drawn-in cursor) have something to send.
struct Fixture {
    FrameMirror mirror;
    std::atomic<std::uint64_t> handled{0};  // InputHandler calls, on the server's thread
    std::unique_ptr<VncServer> server;      // declared after the mirror: destroyed before it
    std::size_t baseline_fds = 0;
    unsigned inputs = 0;

    Fixture() {
        mirror.reset(kWidth, kHeight);
        std::vector<std::uint8_t> pixels(static_cast<std::size_t>(kWidth) * kHeight * 4);
        for (std::size_t i = 0; i < pixels.size(); ++i)
            pixels[i] = static_cast<std::uint8_t>(i % 4 == 3 ? 0 : i * 7 / 5);
        mirror.apply_damage(mirror.seq() + 1, 0, 0, kWidth, kHeight, pixels);
        std::vector<std::uint8_t> cursor(8 * 8 * 4);
        for (std::size_t i = 0; i < cursor.size(); i += 4) {
            std::uint32_t argb = i % 12 == 0 ? 0x80400000u : 0xFFFF0000u;  // some half alpha
            std::memcpy(&cursor[i], &argb, 4);
        }
        mirror.set_cursor_shape(8, 8, 1, 1, 1, cursor);
        mirror.set_cursor_position(20, 10);

        VncServer::Options options;
        options.password = kControlPassword;
        options.view_only_password = kViewPassword;
        options.desktop_name = kDesktopName;
        server = std::make_unique<VncServer>(mirror, options, input_handler());
    }

    VncServer::InputHandler input_handler() {
        return {[this](int, int, int) { handled.fetch_add(1); },
                [this](std::uint32_t keysym, bool) {
                    handled.fetch_add(1);
                    // The server swallows what a handler throws; one keysym exercises that.
                    if (keysym == 0xDEAD) throw std::runtime_error("handler failure");
                },
                [this](std::string text) {
                    handled.fetch_add(1);
                    if (!valid_utf8(text)) fail("cut text handed on is not valid UTF-8");
                    if (text.find('\0') != std::string::npos) fail("cut text handed on has a NUL");
                }};
    }
};

Fixture& fixture() {
    static Fixture instance;
    return instance;
}

enum class Login { none, control, view_only, wrong };

// Where the input's password slot is, read from its ProtocolVersion the way libvncserver reads
// it (sscanf of the first 12 bytes, major 3).
struct Plan {
    std::size_t slot = std::string_view::npos;
    bool rfb33 = false;  // minor < 7: the server sends the security type, the client no choice
};

Plan plan_for(std::string_view input) {
    Plan plan;
    if (input.size() < kVersionSize) return plan;
    char version[kVersionSize + 1] = {};
    std::memcpy(version, input.data(), kVersionSize);
    int major = 0, minor = 0;
    if (std::sscanf(version, rfbProtocolVersionFormat, &major, &minor) != 2 || major != 3)
        return plan;
    if (minor < 7) {
        plan.slot = kVersionSize;
        plan.rfb33 = true;
    } else if (input.size() > kVersionSize &&
               static_cast<unsigned char>(input[kVersionSize]) == rfbSecTypeVncAuth) {
        plan.slot = kVersionSize + 1;
    }
    return plan;
}

// Where the challenge starts in what the server sent, once enough arrived to tell; npos while
// it cannot tell yet, or when the server offers no VNC authentication there.
constexpr std::size_t kNotYet = std::string_view::npos - 1;
std::size_t challenge_offset(const Plan& plan, std::string_view received) {
    if (plan.rfb33) {
        if (received.size() < kVersionSize + 4) return kNotYet;
        std::uint32_t type = 0;
        std::memcpy(&type, received.data() + kVersionSize, 4);
        return ntohl(type) == rfbSecTypeVncAuth ? kVersionSize + 4 : std::string_view::npos;
    }
    if (received.size() <= kVersionSize) return kNotYet;
    std::size_t count = static_cast<unsigned char>(received[kVersionSize]);
    if (received.size() < kVersionSize + 1 + count) return kNotYet;
    std::string_view types = received.substr(kVersionSize + 1, count);
    return types.find(static_cast<char>(rfbSecTypeVncAuth)) != std::string_view::npos
               ? kVersionSize + 1 + count
               : std::string_view::npos;
}

// The DES key VNC authentication makes of a password: up to its first NUL, at most 8 bytes,
// zero padded. DES ignores one bit of each key byte, which VNC's bit order makes bit 7, so
// passwords that differ only there are the same password.
std::array<unsigned char, kPasswordSlot> des_key(std::string_view password) {
    std::array<unsigned char, kPasswordSlot> key{};
    for (std::size_t i = 0; i < key.size() && i < password.size() && password[i] != '\0'; ++i)
        key[i] = static_cast<unsigned char>(password[i]) & 0x7F;
    return key;
}

Login login_of(std::string_view typed) {
    if (des_key(typed) == des_key(kControlPassword)) return Login::control;
    if (des_key(typed) == des_key(kViewPassword)) return Login::view_only;
    return Login::wrong;
}

struct Outcome {
    std::string received;  // the first kKeep bytes the server sent
    std::size_t received_total = 0;
    Login login = Login::none;  // the password a response was made from, if one went out
};

UniqueFd connect_to_server(int port) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) fail("socket() failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    auto fail_with = [](int error) {
        const std::string why =
            std::string("cannot connect to the VNC server: ") + std::strerror(error);
        fail(why.c_str());
    };
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) return fd;
    // libFuzzer's -timeout alarm (SIGALRM every timeout/2+1 s, installed without SA_RESTART)
    // can land while connect() waits for the handshake, which then fails with EINTR although
    // the kernel completes the connection: wait for that instead of calling it a failure (CI
    // saw it about once per 32 s of fuzzing with -timeout=30; -timeout=2 shows it within a
    // minute).
    if (errno != EINTR) fail_with(errno);
    const auto deadline = Clock::now() + 10s;
    for (;;) {
        pollfd p{fd.get(), POLLOUT, 0};
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) fail("connecting to the VNC server took over 10 s");
        int ready = ::poll(&p, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) fail_with(errno);
        if (ready == 0) continue;
        int error = 0;
        socklen_t size = sizeof(error);
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) fail_with(errno);
        if (error != 0) fail_with(error);
        return fd;
    }
}

// `owed`: bytes the server sends at once whatever the input (its ProtocolVersion; the whole
// handshake for a well-formed client). Until they and the challenge arrived, only kReplyWait of
// silence ends the conversation.
Outcome converse_once(std::string_view input, std::size_t owed = kVersionSize) {
    Fixture& f = fixture();
    Outcome outcome;
    UniqueFd socket = connect_to_server(f.server->port());
    Plan plan = plan_for(input);
    bool holding = plan.slot < input.size();  // waiting for the challenge before the slot
    std::string pending(input.substr(0, holding ? plan.slot : input.size()));
    std::size_t sent = 0;
    bool write_closed = false;

    // Sends the slot's bytes as they are: the server did not ask for a response there.
    auto release_raw = [&] {
        pending.append(input.substr(plan.slot));
        holding = false;
    };
    auto try_respond = [&] {
        std::size_t at = challenge_offset(plan, outcome.received);
        if (at == kNotYet) return;
        if (at == std::string_view::npos || input.size() < plan.slot + kPasswordSlot) {
            release_raw();  // no challenge coming, or a truncated password
            return;
        }
        if (outcome.received.size() < at + kChallengeSize) return;
        std::string_view typed = input.substr(plan.slot, kPasswordSlot);
        std::array<char, kPasswordSlot + 1> key{};
        std::memcpy(key.data(), typed.data(), typed.size());
        std::array<unsigned char, kChallengeSize> response{};
        std::memcpy(response.data(), outcome.received.data() + at, kChallengeSize);
        rfbEncryptBytes(response.data(), key.data());
        pending.append(reinterpret_cast<const char*>(response.data()), response.size());
        pending.append(input.substr(plan.slot + kPasswordSlot));
        outcome.login = login_of(typed);
        holding = false;
    };

    const auto start = Clock::now();
    auto last_activity = start;
    std::array<char, 16384> buffer;
    for (;;) {
        if (!holding && sent == pending.size() && !write_closed) {
            ::shutdown(socket.get(), SHUT_WR);  // the server reads EOF after the last message
            write_closed = true;
        }
        auto now = Clock::now();
        bool owed_reply = holding || outcome.received_total < owed;
        auto until = owed_reply ? last_activity + kReplyWait
                                : std::min(start + kConversation, last_activity + kSilence);
        if (now >= until) {
            if (!holding || outcome.received_total < kVersionSize) break;
            release_raw();  // the challenge did not come: the server read the input otherwise
            last_activity = now;
            continue;
        }
        pollfd p{socket.get(), static_cast<short>(POLLIN | (sent < pending.size() ? POLLOUT : 0)),
                 0};
        auto wait = std::chrono::ceil<std::chrono::milliseconds>(until - now);
        int ready = ::poll(&p, 1, static_cast<int>(wait.count()));
        if (ready < 0 && errno != EINTR) fail("poll() failed");
        if (ready <= 0) continue;
        if ((p.revents & POLLOUT) && sent < pending.size()) {
            ssize_t n = ::send(socket.get(), pending.data() + sent, pending.size() - sent,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                sent += static_cast<std::size_t>(n);
                last_activity = Clock::now();
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                // The server closed on us; what it sent before is still to be read.
                pending.clear();
                sent = 0;
                holding = false;
                write_closed = true;
            }
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = ::recv(socket.get(), buffer.data(), buffer.size(), MSG_DONTWAIT);
            if (n == 0) break;  // the server closed: the normal end
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
                break;  // reset
            }
            auto got = static_cast<std::size_t>(n);
            outcome.received_total += got;
            std::size_t keep = std::min(got, kKeep - std::min(kKeep, outcome.received.size()));
            outcome.received.append(buffer.data(), keep);
            last_activity = Clock::now();
            if (holding) try_respond();
        }
    }
    socket.reset();

    // The server frees a client in the same pass that sees it go; a bounded wait covers a pass
    // that is busy elsewhere.
    const auto gone_by = Clock::now() + kClientGoneWait;
    while (f.server->clients() != 0) {
        if (Clock::now() >= gone_by) fail("a client stays connected after its connection closed");
        std::this_thread::sleep_for(20us);
    }
    return outcome;
}

struct ServerInit {
    int width = 0, height = 0, bits_per_pixel = 0;
    std::string name;
};

std::uint32_t be32(std::string_view bytes, std::size_t at) {
    std::uint32_t value = 0;
    std::memcpy(&value, bytes.data() + at, 4);
    return ntohl(value);
}

// What a well-formed client is sent up to and with ServerInit: version, one security type,
// challenge, SecurityResult, ServerInit with the desktop name.
constexpr std::size_t kHandshakeSize =
    kVersionSize + 2 + kChallengeSize + 4 + sz_rfbServerInitMsg + sizeof(kDesktopName) - 1;

// Reads an RFB 3.8 conversation with VNC authentication up to ServerInit; a reason on failure.
const char* read_handshake(std::string_view rx, ServerInit& init) {
    if (rx.size() < kVersionSize || rx.substr(0, kVersionSize) != "RFB 003.008\n")
        return "no RFB 003.008 ProtocolVersion";
    std::size_t at = kVersionSize;
    if (rx.size() <= at || rx[at] == 0) return "no security types";
    std::size_t count = static_cast<unsigned char>(rx[at]);
    if (rx.size() < at + 1 + count ||
        rx.substr(at + 1, count).find(static_cast<char>(rfbSecTypeVncAuth)) == std::string::npos)
        return "VNC authentication not offered";
    at += 1 + count + kChallengeSize;
    if (rx.size() < at + 4) return "no challenge or SecurityResult";
    if (be32(rx, at) != rfbVncAuthOK) return "the control password was refused";
    at += 4;
    if (rx.size() < at + sz_rfbServerInitMsg) return "no ServerInit";
    init.width = static_cast<unsigned char>(rx[at]) << 8 | static_cast<unsigned char>(rx[at + 1]);
    init.height =
        static_cast<unsigned char>(rx[at + 2]) << 8 | static_cast<unsigned char>(rx[at + 3]);
    init.bits_per_pixel = static_cast<unsigned char>(rx[at + 4]);
    std::uint32_t name_length = be32(rx, at + 20);
    at += sz_rfbServerInitMsg;
    if (rx.size() < at + name_length) return "ServerInit's name cut short";
    init.name = std::string(rx.substr(at, name_length));
    return nullptr;
}

}  // namespace

// ---- also used by the corpus replay (tests/streaming/vnc/vnc_corpus_test.cpp) ----

// One conversation with the fuzz server, as for a fuzz input; returns what the server sent.
std::string converse(std::string_view client_bytes) {
    return converse_once(client_bytes).received;
}

// Aborts unless a well-formed client completes the handshake with the fake screen's ServerInit.
void check_still_serving() {
    Fixture& f = fixture();
    std::string hello = "RFB 003.008\n";
    hello += static_cast<char>(rfbSecTypeVncAuth);
    hello += kControlPassword;
    hello += '\1';  // ClientInit: shared
    Outcome outcome = converse_once(hello, kHandshakeSize);
    ServerInit init;
    if (const char* reason = read_handshake(outcome.received, init)) {
        std::fprintf(stderr, "vnc fuzz: a well-formed client failed: %s (%zu bytes received)\n",
                     reason, outcome.received_total);
        fail("the server no longer serves a well-formed client");
    }
    if (init.width != kWidth || init.height != kHeight)
        fail("ServerInit does not have the fake screen's size");
    if (init.bits_per_pixel != 32) fail("ServerInit's pixel format is not 32 bits per pixel");
    if (init.name != kDesktopName) fail("ServerInit does not have the desktop name");
    if (f.server->stats().connections_refused != 0) fail("the server refused a connection");
    std::size_t fds = open_fds();
    if (f.baseline_fds == 0) f.baseline_fds = fds;
    if (fds > f.baseline_fds + kFdSlack) fail("descriptors grow: the server leaks them");
}

}  // namespace deskbox::streaming::vnc_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace deskbox::streaming::vnc_fuzz;
    Fixture& f = fixture();
    if (f.inputs++ % kCheckEvery == 0) check_still_serving();
    std::string_view input(reinterpret_cast<const char*>(data), size);
    std::uint64_t handled_before = f.handled.load();
    Outcome outcome = converse_once(input);
    // The server speaks first, whatever the client sends: no version means its thread is stuck.
    if (outcome.received.compare(0, kVersionSize, "RFB 003.008\n") != 0) {
        std::fprintf(stderr, "vnc fuzz: %zu bytes received\n", outcome.received_total);
        fail("the server did not send its ProtocolVersion");
    }
    if (f.handled.load() != handled_before && outcome.login != Login::control)
        fail("input reached the InputHandler from a client without the control password");
    return 0;
}
