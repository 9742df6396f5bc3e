// The shadow copy of the screen and the per-tile compare that turns raw damage (which X
// over-reports: a window repainting identical pixels is damage too) into rectangles of
// pixels that truly changed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "guest-desktop/capture/types.hpp"

namespace deskbox::capture {

// One flag per tile of a screen cut into tile x tile squares (the last column and row may
// be narrower).
class TileGrid {
  public:
    TileGrid(int width, int height, int tile);

    int columns() const { return columns_; }
    int rows() const { return rows_; }
    int tile() const { return tile_; }
    bool any() const { return marked_ > 0; }
    int marked_count() const { return marked_; }
    bool marked(int column, int row) const { return flags_[index(column, row)] != 0; }

    void mark(int column, int row);
    // Marks every tile the rect touches (clipped to the screen).
    void mark_rect(const Rect& rect);
    void mark_all();
    void clear();

    // Screen rect of a tile, clipped to the screen.
    Rect tile_rect(int column, int row) const;
    // The marked tiles as few rects: runs of adjacent tiles in a tile row, then runs with the
    // same span in consecutive tile rows joined. Clipped to the screen.
    std::vector<Rect> merged_rects() const;
    // Bounding rect of all marked tiles (empty if none).
    Rect bounds() const;

  private:
    std::size_t index(int column, int row) const {
        return static_cast<std::size_t>(row) * static_cast<std::size_t>(columns_) +
               static_cast<std::size_t>(column);
    }
    int width_, height_, tile_, columns_, rows_;
    int marked_ = 0;
    std::vector<std::uint8_t> flags_;
};

class TileDiffer {
  public:
    // Throws CaptureError for a non-positive size or tile.
    TileDiffer(int width, int height, int tile);

    int width() const { return width_; }
    int height() const { return height_; }
    int tile() const { return tile_; }

    // Replaces the whole shadow with a full-screen image (no tile marked changed).
    void reset(const ImageView& full);
    // Compares every tile of `candidates` that lies inside image.area (which must be
    // tile-aligned, or end at the screen's edge) with the shadow; a tile that differs is
    // copied into the shadow and marked changed. Returns the number of tiles compared.
    int compare(const ImageView& image, const TileGrid& candidates);
    // Copies image.area into the shadow and marks its tiles changed, without comparing.
    void overwrite(const ImageView& image);

    const TileGrid& changed() const { return changed_; }
    // Changed tiles as merged rects; clears the changed marks.
    std::vector<Rect> take_changed_rects();

    // Shadow pixels of `rect` (inside the screen), rows tightly packed.
    std::string copy_pixels(const Rect& rect) const;
    const std::uint8_t* shadow_row(int y) const {
        return shadow_.data() + static_cast<std::size_t>(y) * stride_;
    }

  private:
    std::uint8_t* shadow_row_mut(int y) {
        return shadow_.data() + static_cast<std::size_t>(y) * stride_;
    }
    int width_, height_, tile_;
    std::size_t stride_;
    std::vector<std::uint8_t> shadow_;
    TileGrid changed_;
    std::vector<std::uint8_t> tile_state_;  // compare()'s per-column scratch
};

}  // namespace deskbox::capture
