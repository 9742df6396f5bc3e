// A fast PNG writer for screen pixels. OpenCV's (libpng + zlib, adaptive filters) spends about
// 2.5x the CPU for a similar size on a busy 1280x800 screen (bench/streaming/encode_bench), and
// screenshots sit on the agent's critical path.
#pragma once

#include <cstdint>
#include <vector>

#include "streaming/types.hpp"

namespace deskbox::streaming {

// 8-bit RGB PNG of `image` (BGRX; X dropped): the Up filter on every row, one zlib stream from
// libdeflate at `level` (0 = stored .. 12; 1 is fast, 6 is zlib's default trade-off).
std::vector<std::uint8_t> write_png(const ImageView& image, int level);

}  // namespace deskbox::streaming
