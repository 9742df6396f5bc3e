#include "guest-desktop/services/system_service.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <boost/beast/core/detail/base64.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "common/unique_fd.hpp"
#include "guest-desktop/services/params.hpp"

namespace deskbox::services {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxHostnameLength = 64;  // HOST_NAME_MAX on Linux
constexpr std::size_t kMinSeedBytes = 16;
constexpr std::size_t kMaxSeedBytes = 512;
// Bounds that catch unit mistakes (seconds or ms sent as ns land in 1970) and stay clear of
// the kernel's own limit (it refuses times within 30 years of ktime_t's overflow in 2262).
constexpr std::int64_t kMinTimeNs = 1'577'836'800'000'000'000;  // 2020-01-01T00:00:00Z
constexpr std::int64_t kMaxTimeNs = 7'258'118'400'000'000'000;  // 2200-01-01T00:00:00Z

// Capability sets as capget/capset see them: two 32-bit words per set (version 3).
struct CapabilitySets {
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
};

bool read_capabilities(CapabilitySets& sets) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    return ::syscall(SYS_capget, &header, sets.data) == 0;
}

std::string nodename() {
    utsname names{};
    if (::uname(&names) != 0) throw std::system_error(errno, std::generic_category(), "uname");
    return names.nodename;
}

void validate_hostname(const std::string& name) {
    if (name.empty() || name.size() > kMaxHostnameLength)
        throw bad_request("hostname", "must be 1 to " + std::to_string(kMaxHostnameLength) +
                                          " characters, not " + std::to_string(name.size()));
    for (char c : name) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-';
        if (!ok) {
            auto byte = static_cast<unsigned char>(c);
            std::string shown = byte >= 0x21 && byte < 0x7f ? "'" + std::string(1, c) + "'"
                                                            : "byte " + std::to_string(byte);
            throw bad_request("hostname",
                              "may only contain A-Z, a-z, 0-9, '.' and '-', not " + shown);
        }
    }
}

// Strict RFC 4648 base64 with padding: beast's decoder alone stops quietly at the first bad
// character, which would turn a typo into a shorter seed.
std::string decode_seed(const std::string& text) {
    const char* reason = "must be base64 (RFC 4648 alphabet, padded with '=')";
    if (text.empty() || text.size() % 4 != 0) throw bad_request("seed", reason);
    std::size_t padding = 0;
    while (padding < 2 && text[text.size() - 1 - padding] == '=') ++padding;
    std::string bytes(boost::beast::detail::base64::decoded_size(text.size()), '\0');
    auto [written, read] =
        boost::beast::detail::base64::decode(bytes.data(), text.data(), text.size());
    if (read != text.size() - padding) throw bad_request("seed", reason);
    bytes.resize(written);
    if (bytes.size() < kMinSeedBytes || bytes.size() > kMaxSeedBytes)
        throw bad_request("seed", "must decode to " + std::to_string(kMinSeedBytes) + " to " +
                                      std::to_string(kMaxSeedBytes) + " bytes, not " +
                                      std::to_string(bytes.size()));
    return bytes;
}

ServiceError missing_capability(const char* field, const char* capability, const char* what) {
    return ServiceError(error_code::permission_denied,
                        std::string(field) + ": " + what + " needs " + capability +
                            ", which deskbox-agent does not have",
                        field);
}

ServiceError syscall_failed(const char* field, const char* call, const char* capability,
                            int error) {
    if (error == EPERM)
        return ServiceError(error_code::permission_denied,
                            std::string(field) + ": " + call + ": " + std::strerror(error) +
                                " (needs " + capability + ")",
                            field);
    return ServiceError(error_code::io_error,
                        std::string(field) + ": " + call + ": " + std::strerror(error), field);
}

// Adds `seed` to the kernel pool: credited when we may (RNDADDENTROPY needs CAP_SYS_ADMIN),
// otherwise mixed in by a plain write, which anyone may do but which credits nothing.
const char* add_seed(int urandom, const std::string& seed) {
    // rand_pool_info ends in a flexible array of u32 words: build it in u32 storage.
    std::vector<std::uint32_t> storage(sizeof(rand_pool_info) / sizeof(std::uint32_t) +
                                       (seed.size() + 3) / 4);
    auto* info = reinterpret_cast<rand_pool_info*>(storage.data());
    // The host draws the seed from its CSPRNG: every bit is entropy.
    info->entropy_count = static_cast<int>(seed.size() * 8);
    info->buf_size = static_cast<int>(seed.size());
    std::memcpy(reinterpret_cast<char*>(storage.data()) + offsetof(rand_pool_info, buf),
                seed.data(), seed.size());
    if (::ioctl(urandom, RNDADDENTROPY, info) == 0) {
        // Crediting does not reseed a CRNG that is already running (Linux reseeds on a timer,
        // up to 60 s later): two copies of one snapshot would go on drawing the same numbers
        // (they read the same /proc/sys/kernel/random/uuid). Reseed now; kernels before 4.17
        // lack the call, and there the timer has to do.
        (void)::ioctl(urandom, RNDRESEEDCRNG);
        return "credited";
    }
    if (!write_all(urandom, seed.data(), seed.size()))
        throw ServiceError(error_code::io_error,
                           std::string("seed: write to /dev/urandom: ") + std::strerror(errno),
                           "seed");
    return "mixed";
}

}  // namespace

json SystemService::identity(const json& params) const {
    const json& p = params::object(params, {"hostname", "unix_time_ns", "seed"});
    auto hostname = params::opt_string(p, "hostname");
    if (hostname) validate_hostname(*hostname);
    auto time_ns = params::opt_int(p, "unix_time_ns", kMinTimeNs, kMaxTimeNs);
    std::optional<std::string> seed;
    if (auto text = params::opt_string(p, "seed")) seed = decode_seed(*text);

    // Everything that can fail for a foreseeable reason fails here, before any change.
    if (hostname && !has_effective_capability(CAP_SYS_ADMIN))
        throw missing_capability("hostname", "CAP_SYS_ADMIN", "setting the hostname");
    if (time_ns && !has_effective_capability(CAP_SYS_TIME))
        throw missing_capability("unix_time_ns", "CAP_SYS_TIME", "setting the clock");
    UniqueFd urandom;
    if (seed) {
        urandom.reset(::open("/dev/urandom", O_WRONLY | O_CLOEXEC));
        if (!urandom)
            throw ServiceError(
                error_code::io_error,
                std::string("seed: cannot open /dev/urandom: ") + std::strerror(errno), "seed");
    }

    std::optional<std::string> old_hostname;
    if (hostname) {
        old_hostname = nodename();
        if (::sethostname(hostname->data(), hostname->size()) != 0)
            throw syscall_failed("hostname", "sethostname", "CAP_SYS_ADMIN", errno);
    }
    if (time_ns) {
        timespec ts{};
        ts.tv_sec = static_cast<time_t>(*time_ns / 1'000'000'000);
        ts.tv_nsec = static_cast<long>(*time_ns % 1'000'000'000);
        if (::clock_settime(CLOCK_REALTIME, &ts) != 0) {
            int error = errno;
            // Undo the hostname so a failed call leaves the identity as it was.
            if (old_hostname) (void)::sethostname(old_hostname->data(), old_hostname->size());
            throw syscall_failed("unix_time_ns", "clock_settime", "CAP_SYS_TIME", error);
        }
    }
    const char* seeded = seed ? add_seed(urandom.get(), *seed) : "none";
    return {{"hostname", nodename()}, {"clock_set", time_ns.has_value()}, {"seed", seeded}};
}

bool has_effective_capability(int capability) {
    CapabilitySets sets;
    if (capability < 0 || capability >= 32 * _LINUX_CAPABILITY_U32S_3) return false;
    if (!read_capabilities(sets)) return false;
    return (sets.data[capability / 32].effective >> (capability % 32)) & 1U;
}

void clear_inheritable_capabilities() {
    // EINVAL: a kernel without ambient capabilities (before 4.3), so there are none to clear.
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        throw std::system_error(errno, std::generic_category(), "prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
    CapabilitySets sets;
    if (!read_capabilities(sets)) throw std::system_error(errno, std::generic_category(), "capget");
    bool any_inheritable = false;
    for (auto& word : sets.data) {
        any_inheritable = any_inheritable || word.inheritable != 0;
        word.inheritable = 0;
    }
    if (!any_inheritable) return;
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    if (::syscall(SYS_capset, &header, sets.data) != 0)
        throw std::system_error(errno, std::generic_category(), "capset");
}

}  // namespace deskbox::services
