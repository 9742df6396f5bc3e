// The 1-minute load average as text ("?" if unknown): benchmarks print it next to their
// figures, since a busy 2-core machine moves them a lot.
#pragma once

#include <fstream>
#include <string>

namespace deskbox::bench {

inline std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string first;
    in >> first;
    return first.empty() ? "?" : first;
}

}  // namespace deskbox::bench
