// Milliseconds since a steady-clock instant: how long a request or a step took, for answers.
#pragma once

#include <chrono>

namespace deskbox {

inline long long ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start)
        .count();
}

}  // namespace deskbox
