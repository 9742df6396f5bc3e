#include "server/templates/template_transfer.hpp"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/child_process.hpp"
#include "common/random.hpp"
#include "common/temp_dir.hpp"
#include "common/utf8.hpp"

namespace deskbox::templates {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t kBlock = 512;
constexpr std::size_t kMaxRecord = 1 << 20;  // the template's record, a pax or long-name record

std::string be32(std::uint32_t n) {
    return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
            static_cast<char>(n)};
}

std::uint32_t read_be32(std::string_view s) {
    std::uint32_t n = 0;
    for (std::size_t i = 0; i < 4; ++i) n = (n << 8) | static_cast<unsigned char>(s[i]);
    return n;
}

// A header field up to its first NUL.
std::string field(const char* block, std::size_t offset, std::size_t size) {
    const char* start = block + offset;
    return std::string(start, std::find(start, start + size, '\0'));
}

// An octal number field, or a base-256 one (first byte's top bit set) for large sizes.
std::uint64_t number_field(const char* block, std::size_t offset, std::size_t size) {
    const auto* p = reinterpret_cast<const unsigned char*>(block + offset);
    std::uint64_t n = 0;
    if (p[0] & 0x80) {
        for (std::size_t i = 1; i < size; ++i) {
            if (n >> 56) throw TransferError("a tar header's number is too large");
            n = (n << 8) | p[i];
        }
        return n;
    }
    std::size_t i = 0;
    while (i < size && (p[i] == ' ' || p[i] == '\0')) ++i;
    for (; i < size && p[i] >= '0' && p[i] <= '7'; ++i) {
        if (n >> 60) throw TransferError("a tar header's number is too large");
        n = n * 8 + (p[i] - '0');
    }
    return n;
}

bool checksum_right(const char* block) {
    const auto* p = reinterpret_cast<const unsigned char*>(block);
    std::uint64_t sum = 0;
    std::int64_t signed_sum = 0;
    for (std::size_t i = 0; i < kBlock; ++i) {
        const bool in_field = i >= 148 && i < 156;
        sum += in_field ? ' ' : p[i];
        signed_sum += in_field ? ' ' : static_cast<signed char>(p[i]);
    }
    const std::uint64_t stored = number_field(block, 148, 8);
    return stored == sum || static_cast<std::int64_t>(stored) == signed_sum;
}

// The path and linkpath of a pax extended header ("<len> key=value\n" records).
void read_pax(const std::string& data, std::string& path, std::string& link) {
    std::size_t pos = 0;
    while (pos < data.size()) {
        const auto space = data.find(' ', pos);
        if (space == std::string::npos || space == pos || space - pos > 8)
            throw TransferError("a malformed pax header");
        std::size_t length = 0;
        for (std::size_t i = pos; i < space; ++i) {
            if (data[i] < '0' || data[i] > '9') throw TransferError("a malformed pax header");
            length = length * 10 + static_cast<std::size_t>(data[i] - '0');
        }
        if (length <= space - pos + 2 || pos + length > data.size() ||
            data[pos + length - 1] != '\n')
            throw TransferError("a malformed pax header");
        const std::string record = data.substr(space + 1, pos + length - space - 2);
        const auto equals = record.find('=');
        if (equals == std::string::npos) throw TransferError("a malformed pax header");
        const std::string key = record.substr(0, equals);
        if (key == "path") path = record.substr(equals + 1);
        if (key == "linkpath") link = record.substr(equals + 1);
        pos += length;
    }
}

void write_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const auto n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw TransferError(std::string("writing to tar: ") + std::strerror(errno));
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
}

std::string log_tail(const fs::path& log) {
    std::ifstream in(log, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.size() > 600) text = text.substr(text.size() - 600);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return utf8::to_valid(text);
}

// Both sides keep what a rootfs needs: owners by number, modes, xattrs (file capabilities),
// ACLs, links as links; the archive's names are sorted, so one rootfs makes one stream.
std::vector<std::string> tar_options() {
    return {"--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls"};
}

}  // namespace

// ---- SHA-256 ----

struct Sha256::Impl {
    EVP_MD_CTX* context = EVP_MD_CTX_new();
    ~Impl() { EVP_MD_CTX_free(context); }
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
    if (!impl_->context || EVP_DigestInit_ex(impl_->context, EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("SHA-256 is not available");
}

Sha256::~Sha256() = default;

void Sha256::add(std::string_view bytes) {
    EVP_DigestUpdate(impl_->context, bytes.data(), bytes.size());
}

std::string Sha256::digest() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_DigestFinal_ex(impl_->context, out, &size);
    return std::string(reinterpret_cast<char*>(out), size);
}

// ---- the tar headers ----

std::string unsafe_member_name(std::string_view name) {
    if (name.empty()) return "an empty name";
    if (name.front() == '/') return "an absolute path";
    std::size_t start = 0;
    while (start <= name.size()) {
        auto end = name.find('/', start);
        if (end == std::string_view::npos) end = name.size();
        if (name.substr(start, end - start) == "..") return "a '..' component";
        start = end + 1;
    }
    return "";
}

void TarPathGuard::feed(std::string_view bytes) {
    while (!bytes.empty()) {
        if (skip_ > 0) {
            const std::size_t n =
                static_cast<std::size_t>(std::min<std::uint64_t>(skip_, bytes.size()));
            if (keep_ > 0) {
                const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(keep_, n));
                kept_.append(bytes.substr(0, k));
                keep_ -= k;
                if (keep_ == 0) special_data_done();
            }
            skip_ -= n;
            bytes.remove_prefix(n);
            continue;
        }
        const std::size_t take = std::min(kBlock - block_.size(), bytes.size());
        block_.append(bytes.substr(0, take));
        bytes.remove_prefix(take);
        if (block_.size() == kBlock) {
            header(block_.data());
            block_.clear();
        }
    }
}

void TarPathGuard::header(const char* block) {
    if (std::all_of(block, block + kBlock, [](char c) { return c == '\0'; })) {
        ++zero_blocks_;
        return;
    }
    if (zero_blocks_ > 0) throw TransferError("tar data after the end of the archive");
    if (!checksum_right(block)) throw TransferError("a tar header with a wrong checksum");
    const char type = block[156];
    const std::uint64_t size = number_field(block, 124, 12);
    skip_ = (size + kBlock - 1) / kBlock * kBlock;
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
        if (size > kMaxRecord) throw TransferError("a tar extended header over 1 MiB");
        keeping_type_ = type;
        keep_ = size;
        kept_.clear();
        if (size == 0) special_data_done();
        return;
    }
    std::string name = field(block, 0, 100);
    const std::string prefix = field(block, 345, 155);
    if (field(block, 257, 5) == "ustar" && !prefix.empty()) name = prefix + "/" + name;
    if (!long_name_.empty()) name = long_name_;
    if (!pax_path_.empty()) name = pax_path_;
    std::string link = field(block, 157, 100);
    if (!long_link_.empty()) link = long_link_;
    if (!pax_link_.empty()) link = pax_link_;
    if (auto why = unsafe_member_name(name); !why.empty())
        throw TransferError("the archive names '" + utf8::to_valid(name.substr(0, 200)) + "', " +
                            why + ": refused");
    if (type == '1')
        if (auto why = unsafe_member_name(link); !why.empty())
            throw TransferError("the archive hard-links to '" +
                                utf8::to_valid(link.substr(0, 200)) + "', " + why + ": refused");
    long_name_.clear();
    long_link_.clear();
    pax_path_.clear();
    pax_link_.clear();
}

void TarPathGuard::special_data_done() {
    const std::string text = kept_.substr(0, kept_.find('\0'));
    switch (keeping_type_) {
        case 'L':
            long_name_ = text;
            break;
        case 'K':
            long_link_ = text;
            break;
        case 'x':
            read_pax(kept_, pax_path_, pax_link_);
            break;
        default: {  // 'g': applies to every later member
            std::string path, link;
            read_pax(kept_, path, link);
            if (!path.empty() || !link.empty())
                throw TransferError("a global pax header naming a path: refused");
        }
    }
    keeping_type_ = 0;
    kept_.clear();
}

// ---- writing ----

void write_image_stream(const StoredTemplate& stored, const fs::path& rootfs, const ByteSink& out) {
    Sha256 hash;
    auto emit = [&](std::string_view bytes) {
        hash.add(bytes);
        out(bytes);
    };
    const std::string record = stored.to_json().dump();
    emit(std::string(kImageStreamMagic) + be32(static_cast<std::uint32_t>(record.size())) + record);
    TempDir scratch("deskbox-image-out");
    SpawnOptions spawn;
    spawn.argv = {"tar", "--create", "--file=-", "--directory=" + rootfs.string(), "--format=posix",
                  "--sort=name", "--one-file-system", "--pax-option=delete=atime,delete=ctime",
                  // A store rootfs is never written after its export, but its files may be
                  // hard links of a base's that another export links again meanwhile: their
                  // ctime moves, which tar would report as a change (exit status 1).
                  "--warning=no-file-changed"};
    for (auto& option : tar_options()) spawn.argv.push_back(std::move(option));
    spawn.argv.push_back(".");
    spawn.pipe_stdout = true;
    spawn.stderr_file = (scratch.path() / "tar.log").string();
    auto tar = ChildProcess::spawn(spawn);
    // Each chunk is framed in place: its size, then what one read of the pipe gave.
    std::string frame(4 + kMaxImageChunk, '\0');
    while (true) {
        const auto n = ::read(tar.stdout_fd().get(), frame.data() + 4, kMaxImageChunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw TransferError(std::string("reading tar: ") + std::strerror(errno));
        if (n == 0) break;
        frame.replace(0, 4, be32(static_cast<std::uint32_t>(n)));
        emit(std::string_view(frame.data(), 4 + static_cast<std::size_t>(n)));
    }
    const auto status = tar.wait(std::chrono::minutes(5));
    // Exit status 1 is "a file changed as it was read" (silenced above): only a link count
    // moved, unless tar said something else.
    const std::string said = log_tail(scratch.path() / "tar.log");
    const bool clean = status && status->exited() &&
                       (status->exit_code == 0 || (status->exit_code == 1 && said.empty()));
    if (!clean) throw TransferError("tar could not read the rootfs: " + said);
    emit(be32(0));
    out(hash.digest());
}

// ---- reading ----

ImageStreamReader::ImageStreamReader(ByteSink tar_out) : tar_out_(std::move(tar_out)) {}

bool ImageStreamReader::collect(std::string_view& in, std::size_t size) {
    const std::size_t take = std::min(size - pending_.size(), in.size());
    pending_.append(in.substr(0, take));
    in.remove_prefix(take);
    return pending_.size() == size;
}

void ImageStreamReader::feed(std::string_view in) {
    while (!in.empty()) {
        switch (part_) {
            case Part::magic:
                if (!collect(in, kImageStreamMagic.size())) return;
                if (pending_ != kImageStreamMagic)
                    throw TransferError("not a deskbox image stream");
                part_ = Part::record_size;
                break;
            case Part::record_size:
                if (!collect(in, 4)) return;
                chunk_left_ = read_be32(pending_);
                if (chunk_left_ == 0 || chunk_left_ > kMaxRecord)
                    throw TransferError("the stream's template record is empty or over 1 MiB");
                part_ = Part::record;
                break;
            case Part::record: {
                if (!collect(in, chunk_left_)) return;
                record_ = json::parse(pending_, nullptr, false);
                if (!record_.is_object())
                    throw TransferError("the stream's template record is not JSON");
                part_ = Part::chunk_size;
                break;
            }
            case Part::chunk_size:
                if (!collect(in, 4)) return;
                chunk_left_ = read_be32(pending_);
                if (chunk_left_ > kMaxImageChunk) throw TransferError("a chunk over 1 MiB");
                part_ = chunk_left_ == 0 ? Part::digest : Part::chunk;
                if (part_ == Part::digest && !guard_.ended())
                    throw TransferError("the tar ends before its end-of-archive blocks");
                break;
            case Part::chunk: {
                const std::size_t n = std::min(chunk_left_, in.size());
                const std::string_view data = in.substr(0, n);
                hash_.add(data);
                guard_.feed(data);
                tar_out_(data);
                tar_bytes_ += n;
                chunk_left_ -= n;
                in.remove_prefix(n);
                if (chunk_left_ == 0) part_ = Part::chunk_size;
                continue;  // nothing to hash again below
            }
            case Part::digest:
                if (!collect(in, 32)) return;
                if (pending_ != hash_.digest())
                    throw TransferError(
                        "the stream's SHA-256 does not match: it was changed on "
                        "the way");
                part_ = Part::done;
                break;
            case Part::done:
                throw TransferError("bytes after the end of the stream");
        }
        if (part_ != Part::done) hash_.add(pending_);
        pending_.clear();
    }
}

void ImageStreamReader::finish() const {
    if (part_ != Part::done)
        throw TransferError("the stream was cut short (" + std::to_string(tar_bytes_) +
                            " bytes of tar arrived)");
}

// ---- installing ----

bool valid_image_id(std::string_view id) {
    return id.size() >= 12 && id.size() <= 64 &&
           id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

namespace {

// A folder beside the store's images that goes unless it was moved into place.
struct Scratch {
    fs::path dir;
    ~Scratch() {
        std::error_code ec;
        if (!dir.empty()) fs::remove_all(dir, ec);
    }
};

}  // namespace

StoredTemplate install_image_stream(TemplateStore& store, const TemplateRef& ref,
                                    const std::string& image_id, const ByteSource& source) {
    if (!valid_image_id(image_id)) throw TransferError("'" + image_id + "' is not an image id");
    // ".tmp-" folders are skipped by the store's collection and removed at the next start.
    Scratch scratch{store.image_dir(".tmp-pull-" + random::hex(8))};
    fs::create_directories(scratch.dir / "rootfs");
    const fs::path log = scratch.dir / "tar.log";
    SpawnOptions spawn;
    spawn.argv = {"tar",          "--extract",
                  "--file=-",     "--directory=" + (scratch.dir / "rootfs").string(),
                  "--same-owner", "--same-permissions"};
    for (auto& option : tar_options()) spawn.argv.push_back(std::move(option));
    spawn.pipe_stdin = true;
    spawn.stdout_to_null = true;
    spawn.stderr_file = log.string();
    auto tar = ChildProcess::spawn(spawn);
    ImageStreamReader reader([&](std::string_view bytes) {
        try {
            write_all(tar.stdin_fd().get(), bytes);
        } catch (const TransferError& e) {
            throw TransferError(std::string(e.what()) + ": " + log_tail(log));
        }
    });
    std::string buffer(256 << 10, '\0');
    while (const std::size_t n = source(buffer.data(), buffer.size()))
        reader.feed(std::string_view(buffer.data(), n));
    reader.finish();
    tar.stdin_fd().reset();
    const auto status = tar.wait(std::chrono::minutes(10));
    if (!status || !status->exited() || status->exit_code != 0)
        throw TransferError("tar could not unpack the image: " + log_tail(log));
    StoredTemplate stored;
    try {
        stored = StoredTemplate::from_json(reader.record());
    } catch (const json::exception& e) {
        throw TransferError(std::string("the stream's template record: ") + e.what());
    }
    if (stored.image_id != image_id)
        throw TransferError("the stream holds image " + stored.image_id + ", not " + image_id);
    stored.ref = ref;
    fs::remove(log);
    std::error_code ec;
    fs::rename(scratch.dir, store.image_dir(image_id), ec);
    if (!ec)
        scratch.dir.clear();
    else if (!fs::exists(store.rootfs_of(image_id)))  // else: another pull put it there first
        throw TransferError("cannot move the image into the store: " + ec.message());
    store.put(stored);
    return stored;
}

}  // namespace deskbox::templates
