#include "streaming/png_writer.hpp"

#include <libdeflate.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace deskbox::streaming {
namespace {

struct CompressorDeleter {
    void operator()(libdeflate_compressor* c) const { libdeflate_free_compressor(c); }
};
using Compressor = std::unique_ptr<libdeflate_compressor, CompressorDeleter>;

constexpr std::uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr std::uint8_t kFilterUp = 2;

void put_u32(std::uint8_t* out, std::uint32_t value) {
    out[0] = static_cast<std::uint8_t>(value >> 24);
    out[1] = static_cast<std::uint8_t>(value >> 16);
    out[2] = static_cast<std::uint8_t>(value >> 8);
    out[3] = static_cast<std::uint8_t>(value);
}

// Writes length, type and CRC around `length` data bytes already at chunk + 8.
void seal_chunk(std::uint8_t* chunk, const char type[4], std::size_t length) {
    put_u32(chunk, static_cast<std::uint32_t>(length));
    std::memcpy(chunk + 4, type, 4);
    std::uint32_t crc = libdeflate_crc32(0, chunk + 4, length + 4);
    put_u32(chunk + 8 + length, crc);
}

// Rows of filter byte + RGB, each minus the row above (PNG filter type 2, "Up"), into `out`.
void filter_rows(const ImageView& image, std::uint8_t* out) {
    const std::size_t row_bytes = static_cast<std::size_t>(image.width) * 3;
    std::vector<std::uint8_t> previous(row_bytes, 0), current(row_bytes);
    for (int y = 0; y < image.height; ++y) {
        const std::uint8_t* src = image.row(y);
        std::uint8_t* rgb = current.data();
        for (int x = 0; x < image.width; ++x, src += 4, rgb += 3) {
            rgb[0] = src[2];
            rgb[1] = src[1];
            rgb[2] = src[0];
        }
        std::uint8_t* dst = out + static_cast<std::size_t>(y) * (row_bytes + 1);
        *dst++ = kFilterUp;
        const std::uint8_t* above = previous.data();
        const std::uint8_t* now = current.data();
        for (std::size_t i = 0; i < row_bytes; ++i)
            dst[i] = static_cast<std::uint8_t>(now[i] - above[i]);
        std::swap(previous, current);
    }
}

// Scratch that only grows: a fresh multi-megabyte buffer per screenshot costs page faults and
// zero-filling comparable to the filter pass itself.
struct Scratch {
    std::unique_ptr<std::uint8_t[]> data;
    std::size_t size = 0;
    std::uint8_t* get(std::size_t wanted) {
        if (wanted > size) {
            data = std::make_unique_for_overwrite<std::uint8_t[]>(wanted);
            size = wanted;
        }
        return data.get();
    }
};

// What one encode needs besides its output: filtered rows, the zlib stream, and a compressor
// per level (allocating one costs more than compressing a small crop; they are not
// thread-safe).
struct Workspace {
    Scratch filtered, compressed;
    Compressor compressors[13];
};

// A few workspaces shared by every thread. They were per-thread once, and deskboxd's handler
// threads come and go and number in the hundreds at peaks: each pinned ~7 MB until it ended
// (the server's memory grew with every burst of concurrent screenshots). More encodes at once
// than kKept get a workspace of their own, freed after.
class WorkspacePool {
  public:
    static constexpr std::size_t kKept = 4;

    struct Lease {
        WorkspacePool* pool;
        std::unique_ptr<Workspace> workspace;
        Lease(WorkspacePool* p, std::unique_ptr<Workspace> w) : pool(p), workspace(std::move(w)) {}
        Lease(const Lease&) = delete;
        Lease& operator=(const Lease&) = delete;
        ~Lease() { pool->give_back(std::move(workspace)); }
        Workspace* operator->() { return workspace.get(); }
    };

    static WorkspacePool& shared() {
        static WorkspacePool pool;
        return pool;
    }
    Lease take() {
        std::lock_guard lock(mutex_);
        if (free_.empty()) return Lease{this, std::make_unique<Workspace>()};
        auto workspace = std::move(free_.back());
        free_.pop_back();
        return Lease{this, std::move(workspace)};
    }

  private:
    void give_back(std::unique_ptr<Workspace> workspace) {
        std::lock_guard lock(mutex_);
        if (free_.size() < kKept) free_.push_back(std::move(workspace));
    }
    std::mutex mutex_;
    std::vector<std::unique_ptr<Workspace>> free_;
};

}  // namespace

std::vector<std::uint8_t> write_png(const ImageView& image, int level) {
    if (image.empty()) throw std::invalid_argument("write_png: empty image");
    if (level < 0 || level > 12)
        throw std::invalid_argument("write_png: level must be 0..12, got " + std::to_string(level));
    const std::size_t filtered_size =
        (static_cast<std::size_t>(image.width) * 3 + 1) * static_cast<std::size_t>(image.height);
    auto workspace = WorkspacePool::shared().take();
    std::uint8_t* filtered = workspace->filtered.get(filtered_size);
    filter_rows(image, filtered);

    Compressor& compressor = workspace->compressors[level];
    if (!compressor) compressor.reset(libdeflate_alloc_compressor(level));
    if (!compressor) throw std::bad_alloc();
    std::size_t bound = libdeflate_zlib_compress_bound(compressor.get(), filtered_size);
    std::uint8_t* zlib = workspace->compressed.get(bound);
    std::size_t compressed =
        libdeflate_zlib_compress(compressor.get(), filtered, filtered_size, zlib, bound);
    if (compressed == 0) throw std::runtime_error("write_png: compression failed");

    constexpr std::size_t kIhdrChunk = 12 + 13;
    constexpr std::size_t kIendChunk = 12;
    std::vector<std::uint8_t> png(sizeof kSignature + kIhdrChunk + 12 + compressed + kIendChunk);
    std::uint8_t* out = png.data();
    std::memcpy(out, kSignature, sizeof kSignature);

    std::uint8_t* ihdr = out + sizeof kSignature;
    put_u32(ihdr + 8, static_cast<std::uint32_t>(image.width));
    put_u32(ihdr + 12, static_cast<std::uint32_t>(image.height));
    ihdr[16] = 8;  // bits per sample
    ihdr[17] = 2;  // colour type: RGB
    ihdr[18] = 0;  // deflate
    ihdr[19] = 0;  // adaptive filtering (per-row filter byte)
    ihdr[20] = 0;  // not interlaced
    seal_chunk(ihdr, "IHDR", 13);

    std::uint8_t* idat = ihdr + kIhdrChunk;
    std::memcpy(idat + 8, zlib, compressed);
    seal_chunk(idat, "IDAT", compressed);
    seal_chunk(idat + 12 + compressed, "IEND", 0);
    return png;
}

}  // namespace deskbox::streaming
