// A statically linked helper the runtime tests put into the agent dir (/opt/deskbox/bin) so
// it runs inside any rootfs, even a busybox one:
//   runtime_test_helper echo-server PATH   listen on Unix socket PATH, echo every byte back
//   runtime_test_helper probe              print NAME=ok|ERRNO for calls the sandbox denies
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

int echo_server(const char* path) {
    int listener = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
    unlink(path);
    if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(listener, 8) != 0) {
        perror("echo-server");
        return 1;
    }
    while (true) {
        int conn = accept(listener, nullptr, nullptr);
        if (conn < 0) continue;
        char buf[4096];
        ssize_t n;
        while ((n = read(conn, buf, sizeof buf)) > 0)
            if (write(conn, buf, static_cast<size_t>(n)) != n) break;
        close(conn);
    }
}

void report(const char* name, long result) {
    if (result >= 0)
        printf("%s=ok\n", name);
    else
        printf("%s=%s\n", name, strerrorname_np(errno));
}

int probe() {
    // Each of these works for an unprivileged process unless the seccomp profile denies it
    // (or, for mount, capabilities are missing): the profile must make them all EPERM.
    report("keyctl", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
    report("add_key", syscall(SYS_add_key, "user", "deskbox", "x", 1, KEY_SPEC_PROCESS_KEYRING));
    bpf_attr attr{};
    report("bpf", syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr));
    perf_event_attr pe{};
    pe.size = sizeof pe;
    pe.type = PERF_TYPE_SOFTWARE;
    pe.config = PERF_COUNT_SW_TASK_CLOCK;
    pe.exclude_kernel = 1;
    report("perf_event_open", syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
    report("mount", mount("none", "/tmp", "tmpfs", 0, nullptr));
    report("setns", syscall(SYS_setns, 0, 0));
    report("getpid", getpid());
    report("write_opt_deskbox", open("/opt/deskbox/probe", O_WRONLY | O_CREAT, 0644));
    // Nested user namespaces: refused unless the spec allows them. A plain fork must still
    // work, and clone3 (whose flags a filter cannot read) says ENOSYS so libc falls back.
    fflush(stdout);
    long child = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (child == 0) _exit(0);
    if (child > 0) waitpid(static_cast<pid_t>(child), nullptr, 0);
    report("fork", child);
    child = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (child == 0) _exit(0);
    if (child > 0) waitpid(static_cast<pid_t>(child), nullptr, 0);
    report("clone_newuser", child);
    clone_args args{};
    args.exit_signal = SIGCHLD;
    child = syscall(SYS_clone3, &args, sizeof args);
    if (child == 0) _exit(0);
    if (child > 0) waitpid(static_cast<pid_t>(child), nullptr, 0);
    report("clone3", child);
    report("unshare_newuser", unshare(CLONE_NEWUSER));  // last: it moves this process
    fflush(stdout);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 3 && strcmp(argv[1], "echo-server") == 0) return echo_server(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "probe") == 0) return probe();
    fprintf(stderr, "usage: %s echo-server PATH | probe\n", argv[0]);
    return 2;
}
