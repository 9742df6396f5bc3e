#include "server/runtime/microvm/qmp_client.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace deskbox::runtime {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// A line longer than this is not QMP talking (query answers are a few KiB).
constexpr std::size_t kMaxLine = 4 << 20;

int millis_until(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<long long>(0, left.count()));
}

}  // namespace

QmpClient QmpClient::connect(const std::filesystem::path& socket, Clock::time_point deadline,
                             const std::function<std::string()>& still_alive) {
    QmpClient client(connect_unix_retry(socket, deadline, still_alive));
    json greeting = client.read_message("greeting", deadline);
    if (!greeting.contains("QMP"))
        throw RuntimeError("QMP on " + socket.string() + ": expected a greeting, got " +
                           greeting.dump());
    client.execute("qmp_capabilities", json::object(),
                   std::chrono::milliseconds(std::max(1000, millis_until(deadline))));
    return client;
}

json QmpClient::execute(const std::string& command, const json& arguments,
                        std::chrono::milliseconds timeout) {
    return send_and_wait(command, arguments, -1, timeout);
}

json QmpClient::execute_with_fd(const std::string& command, const json& arguments, int fd,
                                std::chrono::milliseconds timeout) {
    if (fd < 0) throw RuntimeError("QMP " + command + ": no fd to pass");
    return send_and_wait(command, arguments, fd, timeout);
}

json QmpClient::send_and_wait(const std::string& command, const json& arguments, int pass_fd,
                              std::chrono::milliseconds timeout) {
    if (!fd_) throw RuntimeError("QMP " + command + ": not connected");
    json request = {{"execute", command}};
    if (!arguments.is_null() && !arguments.empty()) request["arguments"] = arguments;
    std::string line = request.dump() + "\n";
    std::size_t sent = 0;
    auto deadline = Clock::now() + timeout;
    while (sent < line.size()) {
        ssize_t n;
        if (pass_fd >= 0 && sent == 0) {
            // The fd rides on the request's first bytes; QEMU takes it with that read.
            iovec iov{const_cast<char*>(line.data()), line.size()};
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
            msghdr msg{};
            msg.msg_iov = &iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control;
            msg.msg_controllen = sizeof control;
            cmsghdr* header = CMSG_FIRSTHDR(&msg);
            header->cmsg_level = SOL_SOCKET;
            header->cmsg_type = SCM_RIGHTS;
            header->cmsg_len = CMSG_LEN(sizeof(int));
            std::memcpy(CMSG_DATA(header), &pass_fd, sizeof(int));
            n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
        } else {
            n = ::send(fd_.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
        }
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pollfd p{fd_.get(), POLLOUT, 0};
            if (::poll(&p, 1, millis_until(deadline)) == 0)
                throw RuntimeError("QMP " + command + ": timed out sending");
            continue;
        }
        std::string reason = std::strerror(errno);
        fd_.reset();
        throw RuntimeError("QMP " + command + ": connection lost (" + reason + ")");
    }
    json reply = read_reply(command, deadline);
    if (reply.contains("error")) {
        const json& error = reply["error"];
        throw QmpError(command, error.value("class", "GenericError"),
                       error.value("desc", error.dump()));
    }
    if (!reply.contains("return"))
        throw RuntimeError("QMP " + command + ": unexpected answer " + reply.dump());
    return reply["return"];
}

std::vector<json> QmpClient::take_events() {
    return std::exchange(events_, {});
}

json QmpClient::read_reply(const std::string& what, Clock::time_point deadline) {
    while (true) {
        json message = read_message(what, deadline);
        if (message.contains("event")) {
            events_.push_back(std::move(message));
            continue;
        }
        return message;
    }
}

json QmpClient::read_message(const std::string& what, Clock::time_point deadline) {
    while (true) {
        if (auto newline = buffer_.find('\n'); newline != std::string::npos) {
            std::string line = buffer_.substr(0, newline);
            buffer_.erase(0, newline + 1);
            if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
            json message = json::parse(line, nullptr, false);
            if (!message.is_object())
                throw RuntimeError("QMP " + what + ": not a JSON object: " + line.substr(0, 200));
            return message;
        }
        if (buffer_.size() > kMaxLine) {
            fd_.reset();
            throw RuntimeError("QMP " + what + ": line longer than " + std::to_string(kMaxLine));
        }
        pollfd p{fd_.get(), POLLIN, 0};
        int ready = ::poll(&p, 1, millis_until(deadline));
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) throw RuntimeError("QMP " + what + ": no answer in time");
        char chunk[8192];
        ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
            std::string reason = n == 0 ? "QEMU closed the connection" : std::strerror(errno);
            fd_.reset();
            throw RuntimeError("QMP " + what + ": " + reason);
        }
        buffer_.append(chunk, static_cast<std::size_t>(n));
    }
}

}  // namespace deskbox::runtime
