// The encoded images of the frames screenshots asked for last, so that a screenshot of a screen
// that did not change since the previous one is not encoded again. An agent loop takes a
// screenshot after every action, and most actions on a settled desktop change little or
// nothing; encoding a 1280x800 PNG costs several times the rest of the request.
//
// Stale images are impossible by construction: the key is the frame mirror's version, which
// bumps on every damage event and every reset, so any changed pixel (and any new screen size)
// makes a new key. The cursor is part of the key only when it is drawn into the image.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>

#include "streaming/frame_mirror.hpp"
#include "streaming/image_encoder.hpp"

namespace deskbox::streaming {

class EncodedImageCache {
  public:
    // Up to `capacity` images of the newest frame are kept (one per options and cursor): a
    // client alternating a full screenshot and a thumbnail, or PNG and JPEG, hits both. Images
    // of older frames are dropped as soon as a newer frame is encoded.
    explicit EncodedImageCache(std::size_t capacity = 4);

    // encode_image(snapshot, options), or the copy kept from an earlier call with the same
    // frame version, cursor (if composited) and options. Throws what encode_image throws.
    EncodedImage encode(const FrameSnapshot& snapshot, const EncodeOptions& options);

    struct Stats {
        std::uint64_t hits = 0;
        std::uint64_t misses = 0;
        std::size_t entries = 0;  // images kept now
    };
    Stats stats() const;

  private:
    struct Entry {
        std::uint64_t frame_version = 0;
        std::uint64_t generation = 0;
        std::uint64_t cursor_version = 0;  // 0 unless the cursor is composited
        EncodeOptions options;
        EncodedImage image;
    };
    static bool same_options(const EncodeOptions& a, const EncodeOptions& b);

    std::size_t capacity_;
    mutable std::mutex mutex_;
    std::list<Entry> entries_;  // most recently used first
    Stats stats_;
};

}  // namespace deskbox::streaming
