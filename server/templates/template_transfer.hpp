// A store image as one byte stream, so a template built on one node can start sandboxes on
// another (docs/CLUSTER.md, "Templates across nodes"). The stream is:
//
//   "deskbox-image/1\n"                   16 bytes
//   u32 n (big-endian), n bytes            the template's record (StoredTemplate JSON), n <= 1 MiB
//   { u32 n (1 .. 1 MiB), n bytes }*       a POSIX tar of the rootfs (GNU tar --format=posix:
//                                          links as links, hard links kept, numeric ids, xattrs
//                                          and ACLs, names sorted)
//   u32 0                                  the end of the tar
//   32 bytes                               SHA-256 of every byte before them
//
// The reader checks every tar header as it passes (checksum; a name that is absolute or has a
// ".." component, or a hard link to one, is refused: nothing outside the root is ever named),
// refuses a stream cut short (no end marker or digest) or changed (digest mismatch), and only
// then is the image installed: unpacked beside the store, renamed into it whole, its record
// written last. A failed transfer leaves nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/templates/template_store.hpp"

namespace deskbox::templates {

class TransferError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

inline constexpr std::string_view kImageStreamMagic = "deskbox-image/1\n";
inline constexpr std::size_t kMaxImageChunk = 1 << 20;

// Incremental SHA-256 (OpenSSL).
class Sha256 {
  public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    void add(std::string_view bytes);
    std::string digest();  // 32 raw bytes; the object is spent afterwards

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Follows a tar stream's headers as its bytes pass; throws TransferError at a header whose
// checksum is wrong or whose name (or hard link target) could lead outside the root.
class TarPathGuard {
  public:
    void feed(std::string_view bytes);
    bool ended() const { return zero_blocks_ >= 2; }  // the end-of-archive blocks passed

  private:
    void header(const char* block);
    void special_data_done();
    std::string block_;       // a header being collected
    std::uint64_t skip_ = 0;  // data bytes (with padding) of the current member left
    std::uint64_t keep_ = 0;  // of those, bytes of a pax or GNU long-name record to keep
    char keeping_type_ = 0;   // 'x', 'g', 'L', 'K' while keeping
    std::string kept_;        // that record's bytes
    std::string long_name_, long_link_;
    std::string pax_path_, pax_link_;
    int zero_blocks_ = 0;
};

// "" when `name` (a member's path in the archive) stays inside the root, else why not.
std::string unsafe_member_name(std::string_view name);

// The writing side: the whole stream of `stored`'s image from the rootfs at `rootfs`, handed to
// `out` piece by piece (`out` throws to stop: the client went away). Throws TransferError when
// the rootfs cannot be read; then no end marker was written, so the reader refuses the stream.
using ByteSink = std::function<void(std::string_view)>;
void write_image_stream(const StoredTemplate& stored, const std::filesystem::path& rootfs,
                        const ByteSink& out);

// The reading side, fed bytes as they arrive: checks the framing, the digest and each tar
// header, and hands the tar's bytes to `tar_out`.
class ImageStreamReader {
  public:
    explicit ImageStreamReader(ByteSink tar_out);
    void feed(std::string_view bytes);  // throws TransferError
    // At the end of the input: throws TransferError unless the stream was complete and intact.
    void finish() const;
    // The sender's record of the template (null until it arrived).
    const nlohmann::json& record() const { return record_; }

  private:
    enum class Part { magic, record_size, record, chunk_size, chunk, digest, done };
    bool collect(std::string_view& in, std::size_t size);  // into pending_; true when full
    ByteSink tar_out_;
    Sha256 hash_;
    TarPathGuard guard_;
    Part part_ = Part::magic;
    std::string pending_;
    std::size_t chunk_left_ = 0;
    nlohmann::json record_;
    std::uint64_t tar_bytes_ = 0;
};

// Reads an image stream from `source` (fills the buffer, returns how many bytes; 0 at the end;
// throws on a failed read) and installs it: the rootfs as store image `image_id` (the stream
// must say that id), and the record of `ref` pointing at it. Returns the record. Throws
// TransferError (nothing left behind) when the stream is not complete and intact.
using ByteSource = std::function<std::size_t(char* buffer, std::size_t capacity)>;
StoredTemplate install_image_stream(TemplateStore& store, const TemplateRef& ref,
                                    const std::string& image_id, const ByteSource& source);

// An image id as the store names them: 12 to 64 lowercase hex digits.
bool valid_image_id(std::string_view id);

}  // namespace deskbox::templates
