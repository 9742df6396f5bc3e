#include "server/cli/template_upload.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "common/unique_fd.hpp"
#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using client::ApiError;
using client::Method;
using client::Query;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string errno_text() {
    return std::strerror(errno);
}

json send_part(client::ApiClient& client, const Upload& upload, const std::string& part) {
    const std::string target = upload.id.empty()
                                   ? "/v1/templates/uploads"
                                   : "/v1/templates/uploads/" + client::percent_encode(upload.id) +
                                         Query().add("offset", std::to_string(upload.bytes)).str();
    for (int attempt = 0;; ++attempt) {
        try {
            return client
                .call(upload.id.empty() ? Method::post : Method::put, target, part,
                      "application/octet-stream")
                .json();
        } catch (const ApiError& error) {
            // 503: too many bodies in flight on the server; it asks to come back shortly.
            if (error.status() == 503 && attempt < 5) {
                std::this_thread::sleep_for(std::chrono::seconds(1 << attempt));
                continue;
            }
            if (error.status() == 413 && error.code() == "payload_too_large")
                throw std::runtime_error(error.message() +
                                         ": send smaller parts with --part-mb (the server's "
                                         "--max-body-mb bounds a part)");
            throw;
        }
    }
}

}  // namespace

Upload upload_parts(client::ApiClient& client, const Reader& read, std::size_t part_bytes,
                    const std::function<void()>& check_interrupt) {
    client.set_request_timeout(std::chrono::minutes(10));
    Upload upload;
    std::string part(part_bytes, '\0');
    bool end = false;
    while (!end) {
        std::size_t filled = 0;
        while (filled < part_bytes) {
            const std::size_t n = read(part.data() + filled, part_bytes - filled);
            if (n == 0) {
                end = true;
                break;
            }
            filled += n;
        }
        if (filled == 0 && !upload.id.empty()) break;
        check_interrupt();
        json answer = send_part(client, upload, part.substr(0, filled));
        if (upload.id.empty()) upload.id = required_string(answer, "upload_id", "the upload");
        const auto expected = upload.bytes + filled;
        upload.bytes = answer.value("bytes", std::uint64_t{0});
        if (upload.bytes != expected)
            throw std::runtime_error("the server holds " + std::to_string(upload.bytes) +
                                     " bytes of upload " + upload.id + ", not the " +
                                     std::to_string(expected) + " sent");
    }
    return upload;
}

TarStream::TarStream(const fs::path& dir, const std::vector<std::string>& entries,
                     std::function<void()> check_interrupt)
    : check_interrupt_(std::move(check_interrupt)) {
    std::string pattern = (fs::temp_directory_path() / "deskbox-context-XXXXXX").string();
    UniqueFd fd(::mkstemp(pattern.data()));
    if (!fd) throw std::runtime_error("cannot create a temporary file: " + errno_text());
    list_ = pattern;
    std::string names;
    for (const auto& entry : entries) names += entry + '\0';
    for (std::size_t done = 0; done < names.size();) {
        auto n = ::write(fd.get(), names.data() + done, names.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw std::runtime_error("cannot write " + list_ + ": " + errno_text());
        done += static_cast<std::size_t>(n);
    }
    SpawnOptions spawn;
    // Names are "./..." (never an option); links are archived as links, never followed.
    spawn.argv = {"tar",
                  "--create",
                  "--file=-",
                  "--directory=" + dir.string(),
                  "--no-recursion",
                  "--null",
                  "--files-from=" + list_,
                  "--numeric-owner"};
    spawn.pipe_stdout = true;
    spawn.env_overrides = {{"LC_ALL", "C"}};
    try {
        child_ = ChildProcess::spawn(spawn);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("cannot run tar: ") + e.what());
    }
}
TarStream::~TarStream() {
    if (!list_.empty()) ::unlink(list_.c_str());
}

std::size_t TarStream::read(char* buffer, std::size_t size) {
    while (true) {
        auto n = ::read(child_.stdout_fd().get(), buffer, size);
        if (n >= 0) return static_cast<std::size_t>(n);
        if (errno == EINTR) {
            check_interrupt_();
            continue;
        }
        throw std::runtime_error("cannot read tar's output: " + errno_text());
    }
}
void TarStream::finish() {
    auto status = child_.wait();
    if (!status || !status->exited() || status->exit_code > 1)
        throw std::runtime_error(
            "tar could not archive the build context (see its message "
            "above)");
}

}  // namespace deskbox::cli
