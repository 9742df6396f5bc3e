#include "streaming/encoded_image_cache.hpp"

#include <algorithm>

namespace deskbox::streaming {

EncodedImageCache::EncodedImageCache(std::size_t capacity)
    : capacity_(std::max<std::size_t>(1, capacity)) {}

bool EncodedImageCache::same_options(const EncodeOptions& a, const EncodeOptions& b) {
    return a.format == b.format && a.quality == b.quality &&
           a.png_compression == b.png_compression && a.width == b.width && a.height == b.height &&
           a.region == b.region && a.composite_cursor == b.composite_cursor;
}

EncodedImage EncodedImageCache::encode(const FrameSnapshot& snapshot,
                                       const EncodeOptions& options) {
    // The frame's own version, not only the snapshot's: they agree, and the pixels are what
    // must not be stale.
    const std::uint64_t frame_version = snapshot.frame ? snapshot.frame->version : 0;
    const std::uint64_t cursor_version = options.composite_cursor ? snapshot.cursor.version : 0;
    const auto matches = [&](const Entry& e) {
        return e.frame_version == frame_version && e.generation == snapshot.generation &&
               e.cursor_version == cursor_version && same_options(e.options, options);
    };
    {
        std::lock_guard lock(mutex_);
        if (snapshot.frame) {
            auto it = std::find_if(entries_.begin(), entries_.end(), matches);
            if (it != entries_.end()) {
                entries_.splice(entries_.begin(), entries_, it);
                ++stats_.hits;
                return it->image;
            }
        }
        ++stats_.misses;
    }
    // Encoded outside the lock: concurrent screenshots of different frames do not queue. Two
    // misses on one frame at once both encode; the second insert is then a duplicate, dropped.
    EncodedImage image = encode_image(snapshot, options);
    std::lock_guard lock(mutex_);
    if (std::none_of(entries_.begin(), entries_.end(), matches)) {
        // Versions only grow: images of older frames can never be asked for again, so they go
        // now rather than when pushed out (an idle sandbox keeps one image, not `capacity`).
        std::erase_if(entries_, [&](const Entry& e) {
            return e.generation < snapshot.generation ||
                   (e.generation == snapshot.generation && e.frame_version < frame_version);
        });
        entries_.push_front(
            Entry{frame_version, snapshot.generation, cursor_version, options, image});
        if (entries_.size() > capacity_) entries_.pop_back();
    }
    return image;
}

EncodedImageCache::Stats EncodedImageCache::stats() const {
    std::lock_guard lock(mutex_);
    Stats stats = stats_;
    stats.entries = entries_.size();
    return stats;
}

}  // namespace deskbox::streaming
