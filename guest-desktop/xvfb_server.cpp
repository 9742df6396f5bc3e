#include "guest-desktop/xvfb_server.hpp"

#include <poll.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace deskbox::desktop {

XvfbServer::XvfbServer(const XvfbOptions& options) : options_(options) {
    Pipe displayfd = Pipe::create();
    SpawnOptions spawn;
    spawn.argv = {"Xvfb",
                  "-displayfd",
                  std::to_string(displayfd.write.get()),
                  "-screen",
                  "0",
                  std::to_string(options.width) + "x" + std::to_string(options.height) + "x" +
                      std::to_string(options.depth),
                  "-dpi",
                  std::to_string(options.dpi),
                  "-nolisten",
                  "tcp",
                  "-noreset",
                  "+extension",
                  "XTEST",
                  "+extension",
                  "DAMAGE",
                  "+extension",
                  "XFIXES",
                  "+extension",
                  "MIT-SHM"};
    for (const auto& a : options.extra_args) spawn.argv.push_back(a);
    spawn.keep_fds = {displayfd.write.get()};
    if (options.log_file.empty()) {
        char templ[] = "/tmp/deskbox-xvfb-XXXXXX.log";
        int fd = ::mkstemps(templ, 4);
        if (fd < 0) throw std::runtime_error("cannot create Xvfb log file");
        ::close(fd);
        log_file_ = templ;
        own_log_ = true;
    } else {
        log_file_ = options.log_file;
    }
    spawn.stderr_file = log_file_;
    spawn.stdout_to_null = true;
    process_ = ChildProcess::spawn(spawn);
    displayfd.write.reset();

    // Xvfb writes "N\n" to -displayfd once it is listening.
    std::string number;
    auto deadline = std::chrono::steady_clock::now() + options.start_timeout;
    pollfd pfd{displayfd.read.get(), POLLIN, 0};
    char buf[64];
    while (number.find('\n') == std::string::npos) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        bool alive = process_.running();
        if (left.count() <= 0 || !alive || pfd.fd < 0) {
            process_.terminate();
            std::ifstream log(log_file_);
            std::string errors((std::istreambuf_iterator<char>(log)), {});
            if (own_log_) ::unlink(log_file_.c_str());
            throw std::runtime_error(std::string("Xvfb did not start (") +
                                     (alive ? "timed out" : "exited") + "): " + errors);
        }
        if (::poll(&pfd, 1, static_cast<int>(std::min<long>(left.count(), 100))) <= 0) continue;
        ssize_t n = ::read(pfd.fd, buf, sizeof buf);
        if (n <= 0)
            pfd.fd = -1;
        else
            number.append(buf, static_cast<std::size_t>(n));
    }
    display_number_ = std::stoi(number);
    display_name_ = ":" + std::to_string(display_number_);
}

XvfbServer::~XvfbServer() {
    process_.terminate(std::chrono::milliseconds(1000));
    if (own_log_) ::unlink(log_file_.c_str());
}

DisplayPtr XvfbServer::connect() const {
    DisplayPtr d(XOpenDisplay(display_name_.c_str()));
    if (!d) throw std::runtime_error("cannot connect to X display " + display_name_);
    return d;
}

}  // namespace deskbox::desktop
