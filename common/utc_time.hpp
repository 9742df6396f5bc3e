// A point in time as the API writes it: RFC 3339 in UTC to the second ("2026-12-05T13:10:27Z").
#pragma once

#include <chrono>
#include <ctime>
#include <string>

namespace deskbox {

inline std::string utc_rfc3339(std::chrono::system_clock::time_point t) {
    std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace deskbox
