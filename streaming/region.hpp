// Damage regions as short lists of rectangles.
#pragma once

#include <cstddef>
#include <vector>

#include "streaming/types.hpp"

namespace deskbox::streaming {

// Reduces damaged rectangles to at most `max_rects` (>= 1) that together cover every pixel of
// them. While it can, the result covers exactly those pixels (duplicates and contained rects
// dropped, rects whose union is a rectangle joined); past `max_rects` it joins the pairs that add
// the least uncovered area (long lists first coarsened on a tile grid). Empty rects are ignored.
std::vector<Rect> simplify_region(std::vector<Rect> rects, std::size_t max_rects);

}  // namespace deskbox::streaming
