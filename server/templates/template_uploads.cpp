// Uploads: a build context or an image archive sent in parts before the build that uses it
// (POST /v1/templates/uploads, then parts at their offsets); kept for `upload_lifetime` unused.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/atomic_file.hpp"
#include "common/random.hpp"
#include "server/templates/template_jobs.hpp"

namespace deskbox::templates {

namespace fs = std::filesystem;
using Code = TemplateError::Code;

fs::path TemplateService::upload_path(const std::string& id) const {
    return options_.dir / "uploads" / id;
}

TemplateService::UploadInfo TemplateService::create_upload(std::string_view data) {
    if (data.size() > options_.max_upload_bytes)
        throw TemplateError(
            Code::too_large,
            "an upload may hold at most " + std::to_string(options_.max_upload_bytes) + " bytes");
    std::string id = "upl-" + random::hex(12);
    {
        std::lock_guard lock(mutex_);
        const auto now = std::chrono::steady_clock::now();
        for (auto it = uploads_.begin(); it != uploads_.end();) {
            if (!it->second.busy && now - it->second.used > options_.upload_lifetime) {
                std::error_code ec;
                fs::remove(upload_path(it->first), ec);
                it = uploads_.erase(it);
            } else {
                ++it;
            }
        }
        uploads_[id] = Upload{data.size(), now, true};
    }
    try {
        atomic_file::write(upload_path(id), data, {0600, atomic_file::Durability::process_crash});
    } catch (...) {
        std::lock_guard lock(mutex_);
        uploads_.erase(id);
        throw;
    }
    std::lock_guard lock(mutex_);
    uploads_[id].busy = false;
    return {id, data.size()};
}

TemplateService::UploadInfo TemplateService::append_upload(const std::string& id,
                                                           std::uint64_t offset,
                                                           std::string_view data) {
    {
        std::lock_guard lock(mutex_);
        auto it = uploads_.find(id);
        if (it == uploads_.end())
            throw TemplateError(Code::not_found, "no upload '" + id + "'", "id");
        if (it->second.busy)
            throw TemplateError(Code::conflict, "upload '" + id + "' is in use", "id");
        if (offset != it->second.bytes)
            throw TemplateError(Code::conflict,
                                "offset " + std::to_string(offset) + " is not the upload's size " +
                                    std::to_string(it->second.bytes) + " (send the part there)",
                                "offset");
        if (it->second.bytes + data.size() > options_.max_upload_bytes)
            throw TemplateError(Code::too_large, "an upload may hold at most " +
                                                     std::to_string(options_.max_upload_bytes) +
                                                     " bytes");
        it->second.busy = true;
    }
    UniqueFd fd(::open(upload_path(id).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    bool ok = static_cast<bool>(fd);
    std::size_t done = 0;
    while (ok && done < data.size()) {
        auto n = ::write(fd.get(), data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) done += static_cast<std::size_t>(n);
    }
    std::lock_guard lock(mutex_);
    auto& upload = uploads_[id];
    upload.busy = false;
    upload.used = std::chrono::steady_clock::now();
    if (!ok) {
        // A part written halfway would shift every later offset: cut back to the old size.
        if (::truncate(upload_path(id).c_str(), static_cast<off_t>(upload.bytes)) != 0) {
        }
        throw std::runtime_error("cannot write upload " + id + ": " + std::strerror(errno));
    }
    upload.bytes += data.size();
    return {id, upload.bytes};
}

}  // namespace deskbox::templates
