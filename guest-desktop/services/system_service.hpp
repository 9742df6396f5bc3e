// system.*: the guest's machine-wide state. system.identity gives a microVM restored from a
// shared template memory snapshot its own identity: every sandbox restored from one snapshot
// starts with the template's hostname, the wall clock of the moment the snapshot was taken and
// the kernel random pool the template had, so each needs a fresh hostname, the host's clock
// and fresh randomness before it runs anything that depends on them.
#pragma once

#include <nlohmann/json.hpp>

#include "guest-desktop/services/service_error.hpp"

namespace deskbox::services {

class SystemService {
  public:
    // system.identity. All params optional:
    //   "hostname": 1..64 chars of [A-Za-z0-9.-] → sethostname (needs CAP_SYS_ADMIN)
    //   "unix_time_ns": integer ns since the epoch (the host's CLOCK_REALTIME), between
    //       2020-01-01 and 2200-01-01 → clock_settime(CLOCK_REALTIME) (needs CAP_SYS_TIME)
    //   "seed": base64 (RFC 4648, padded) of 16..512 bytes → mixed into the kernel pool with
    //       RNDADDENTROPY (credited; needs CAP_SYS_ADMIN) or else a plain write to
    //       /dev/urandom (mixed, not credited; anyone may)
    // → {"hostname": uname's nodename afterwards, "clock_set": bool,
    //    "seed": "credited" | "mixed" | "none"}.
    // Everything is validated before anything is applied (bad_request naming the field), and a
    // missing capability is found before anything is applied too (permission_denied naming
    // the capability). If the clock cannot be set after the hostname was, the old hostname is
    // restored.
    nlohmann::json identity(const nlohmann::json& params) const;
};

// Whether the calling thread has `capability` (CAP_* from <linux/capability.h>) in its
// effective set. False if the set cannot be read.
bool has_effective_capability(int capability);

// Empties the calling thread's ambient and inheritable capability sets, so programs it
// starts do not inherit its capabilities; its own permitted/effective sets are unchanged.
// A no-op without capabilities. Throws std::system_error if the kernel refuses.
void clear_inheritable_capabilities();

}  // namespace deskbox::services
