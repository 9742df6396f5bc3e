// A small synchronous client for QEMU's machine protocol (QMP) on a Unix socket: one JSON
// object per line; the server greets, the client negotiates capabilities, then each command
// gets a "return" or an "error"; asynchronous events ({"event":...}) may arrive in between
// and are kept for whoever asks.
//
// Not thread-safe: the microVM sandbox calls it under its own lock.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"
#include "server/runtime/runtime.hpp"

namespace deskbox::runtime {

// QEMU answered a command with {"error":{"class","desc"}}.
class QmpError : public RuntimeError {
  public:
    QmpError(const std::string& command, std::string error_class, const std::string& desc)
        : RuntimeError("QMP " + command + ": " + error_class + ": " + desc),
          error_class_(std::move(error_class)) {}
    const std::string& error_class() const { return error_class_; }

  private:
    std::string error_class_;
};

class QmpClient {
  public:
    QmpClient() = default;
    // Connects to `socket`, retrying while it refuses until `deadline` (asking `still_alive`
    // between attempts, as connect_unix_retry does), reads the greeting and enters command
    // mode. Throws RuntimeError.
    static QmpClient connect(const std::filesystem::path& socket,
                             std::chrono::steady_clock::time_point deadline,
                             const std::function<std::string()>& still_alive);

    // Runs `command` and returns its "return" value. Throws QmpError (QEMU refused),
    // RuntimeError (connection lost, malformed answer, no answer within `timeout`).
    nlohmann::json execute(const std::string& command,
                           const nlohmann::json& arguments = nlohmann::json::object(),
                           std::chrono::milliseconds timeout = std::chrono::seconds(10));
    // Like execute, with `fd` attached to the request (SCM_RIGHTS), as `getfd` and
    // `add-fd` expect: QEMU keeps its own copy, the caller still owns `fd`.
    nlohmann::json execute_with_fd(const std::string& command, const nlohmann::json& arguments,
                                   int fd,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(10));

    // Events received so far, oldest first; the list is emptied.
    std::vector<nlohmann::json> take_events();

    bool connected() const { return static_cast<bool>(fd_); }
    void close() { fd_.reset(); }

  private:
    explicit QmpClient(UniqueFd fd) : fd_(std::move(fd)) {}
    nlohmann::json send_and_wait(const std::string& command, const nlohmann::json& arguments,
                                 int pass_fd, std::chrono::milliseconds timeout);
    // The next line that is not an event; events are queued.
    nlohmann::json read_reply(const std::string& what,
                              std::chrono::steady_clock::time_point deadline);
    nlohmann::json read_message(const std::string& what,
                                std::chrono::steady_clock::time_point deadline);

    UniqueFd fd_;
    std::string buffer_;
    std::vector<nlohmann::json> events_;
};

}  // namespace deskbox::runtime
