#include "server/network/netns.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/child_process.hpp"

namespace deskbox::network {
namespace {

std::string errno_text(const std::string& what) {
    return what + ": " + std::strerror(errno);
}

}  // namespace

NetworkNamespace::NetworkNamespace(UniqueFd fd) : fd_(std::move(fd)) {
    struct stat st {};
    if (::fstat(fd_.get(), &st) == 0) inode_ = st.st_ino;
}

NetworkNamespace NetworkNamespace::create() {
    UniqueFd made;
    std::string error;
    // unshare(CLONE_NEWNET) moves only the calling thread, which ends right after: the
    // namespace lives on through the fd it opened.
    std::thread maker([&] {
        if (::unshare(CLONE_NEWNET) != 0) {
            error = errno_text("unshare(CLONE_NEWNET)");
            return;
        }
        int fd = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            error = errno_text("open /proc/thread-self/ns/net");
            return;
        }
        made.reset(fd);
    });
    maker.join();
    if (!made) throw NetworkError("cannot create a network namespace: " + error);
    return NetworkNamespace(std::move(made));
}

NetworkNamespace NetworkNamespace::open(const std::filesystem::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw NetworkError(errno_text("cannot open network namespace " + path.string()));
    return NetworkNamespace(UniqueFd(fd));
}

std::string NetworkNamespace::path() const {
    return "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd_.get());
}

void NetworkNamespace::run(const std::function<void()>& fn) const {
    std::exception_ptr failure;
    std::thread worker([&] {
        try {
            if (::setns(fd_.get(), CLONE_NEWNET) != 0)
                throw NetworkError(errno_text("setns into a sandbox network namespace"));
            fn();
        } catch (...) {
            failure = std::current_exception();
        }
    });
    worker.join();
    if (failure) std::rethrow_exception(failure);
}

UniqueFd NetworkNamespace::socket(int domain, int type, int protocol) const {
    UniqueFd out;
    run([&] {
        int fd = ::socket(domain, type | SOCK_CLOEXEC, protocol);
        if (fd < 0) throw NetworkError(errno_text("socket in a sandbox network namespace"));
        out.reset(fd);
    });
    return out;
}

void NetworkNamespace::exec(const std::vector<std::string>& argv, const std::string& input,
                            std::chrono::milliseconds timeout) const {
    SpawnOptions options;
    options.argv = argv;
    options.netns_fd = fd_.get();
    RunResult r;
    try {
        r = run_process(options, timeout, input);
    } catch (const std::system_error& e) {
        throw NetworkError(std::string(e.what()) + " (is " + argv.front() +
                           " installed? scripts/setup.sh installs it)");
    }
    if (r.timed_out || r.status.exit_code != 0 || r.status.signal != 0) {
        std::string words = r.err.empty() ? r.out : r.err;
        while (!words.empty() && (words.back() == '\n' || words.back() == ' ')) words.pop_back();
        throw NetworkError(argv.front() + " failed" +
                           (r.timed_out ? std::string(" (timed out)") : std::string()) + ": " +
                           words);
    }
}

void set_netns_sysctl(const NetworkNamespace& ns, const std::string& key,
                      const std::string& value) {
    ns.run([&] {
        // /proc/sys/net shows the namespace of the thread that opens it.
        std::string path = "/proc/thread-self/net/../../sys/net/" + key;
        path = "/proc/sys/net/" + key;
        std::ofstream out(path);
        out << value;
        out.flush();
        if (!out) throw NetworkError("cannot set " + path + " = " + value);
    });
}

}  // namespace deskbox::network
