// Templates users build: deskbox template build | import | ls | inspect | rm | builds | logs |
// cancel. A build sends its context (tar of the directory, .dockerignore applied) in parts,
// starts the build and follows its log from a byte offset, so a dropped connection resumes
// where it stopped; on a terminal, stderr shows the step the build is at.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "common/child_process.hpp"
#include "server/cli/build_context.hpp"
#include "server/cli/cli_commands.hpp"
#include "server/cli/progress_line.hpp"
#include "server/cli/template_upload.hpp"

namespace deskbox::cli {

using client::ApiError;
using client::ConnectionError;
using client::Method;
using client::Query;
using nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr long long kDefaultPartMb = 32;
constexpr int kExitInterrupted = 130;
// Reconnection attempts while following a log (about a minute and a half in all).
constexpr int kMaxFollowFailures = 20;

// --- Ctrl-C: the first one cancels the build being followed, a second one ends deskbox ------

volatile std::sig_atomic_t interrupted = 0;

extern "C" void on_interrupt(int) {
    interrupted = 1;
}

class InterruptCatcher {
  public:
    InterruptCatcher() {
        interrupted = 0;
        struct sigaction action {};
        action.sa_handler = on_interrupt;
        action.sa_flags = SA_RESETHAND;  // the second ^C has the default effect
        sigemptyset(&action.sa_mask);
        installed_ = ::sigaction(SIGINT, &action, &previous_) == 0;
        // Started with ^C ignored (a background job of a shell): leave it so.
        if (installed_ && previous_.sa_handler == SIG_IGN) {
            ::sigaction(SIGINT, &previous_, nullptr);
            installed_ = false;
        }
    }
    ~InterruptCatcher() {
        if (installed_) ::sigaction(SIGINT, &previous_, nullptr);
    }
    InterruptCatcher(const InterruptCatcher&) = delete;
    InterruptCatcher& operator=(const InterruptCatcher&) = delete;

  private:
    struct sigaction previous_ {};
    bool installed_ = false;
};

struct Interrupted {};

void throw_if_interrupted() {
    if (interrupted) throw Interrupted{};
}

// --- text ---------------------------------------------------------------------------------

std::string build_path(const std::string& id) {
    if (id.empty()) throw UsageError("the build ID is empty");
    return "/v1/templates/builds/" + client::percent_encode(id);
}

std::string template_path(const std::string& ref) {
    if (ref.empty()) throw UsageError("the template name is empty");
    return "/v1/templates/" + client::percent_encode(ref);
}

// NAME[:TAG] into the build request (the server checks both and names the bad one).
void put_ref(json& body, const std::string& ref) {
    const auto colon = ref.find(':');
    body["name"] = ref.substr(0, colon);
    if (colon != std::string::npos) body["tag"] = ref.substr(colon + 1);
}

bool stderr_is_terminal(const Context& context) {
    return &context.err == &std::cerr && ::isatty(STDERR_FILENO) == 1;
}

// --- uploads (server/cli/template_upload.hpp) ---------------------------------------------

long long part_bytes_of(const ParsedArgs& args) {
    return parse_integer(args.get("--part-mb").value_or(std::to_string(kDefaultPartMb)),
                         "--part-mb", 1, 1024) *
           (1 << 20);
}

// --- following a build --------------------------------------------------------------------

json get_with_retries(Context& context, const std::string& target) {
    for (int attempt = 1;; ++attempt) {
        try {
            return context.client().get_json(target);
        } catch (const ConnectionError&) {
            if (attempt >= 5) throw;
            std::this_thread::sleep_for(std::chrono::seconds(attempt));
        }
    }
}

std::string progress_text(const json& build, const std::string& note, double elapsed) {
    const std::string status = build.value("status", "");
    const int step = build.value("step", 0), steps = build.value("steps", 0);
    std::string text;
    if (status == "queued") {
        text = "[queued] waiting for the builds before it";
    } else if (!note.empty() && (steps == 0 || step >= steps)) {
        text = "[deskbox] " + note;
    } else if (steps > 0) {
        text = "[step " + std::to_string(step) + "/" + std::to_string(steps) + "] " +
               build.value("instruction", "");
    } else {
        text = "[" + status + "]";
    }
    return text + " (" + std::to_string(static_cast<long long>(elapsed)) + " s)";
}

struct FollowOptions {
    bool print_log = true;
    bool cancel_on_interrupt = false;
};

// The last "STEP ..." or "deskbox: ..." line of a log fed in pieces: what deskbox does between
// and after steps (the progress line's note).
class StepNote {
  public:
    void feed(const std::string& text) {
        partial_line_ += text;
        std::size_t newline;
        while ((newline = partial_line_.find('\n')) != std::string::npos) {
            const std::string line = partial_line_.substr(0, newline);
            partial_line_.erase(0, newline + 1);
            if (line.starts_with("STEP "))
                note_.clear();
            else if (line.starts_with("deskbox: "))
                note_ = line.substr(9);
        }
    }
    const std::string& note() const { return note_; }

  private:
    std::string note_;
    std::string partial_line_;
};

// One long poll of the log from `offset`; nullopt after a dropped connection (said once, then
// retried by the caller after a pause), thrown past kMaxFollowFailures in a row.
std::optional<json> poll_log(Context& context, const std::string& id, std::uint64_t offset,
                             int& failures, ProgressLine& progress) {
    try {
        json chunk = context.client().get_json(
            build_path(id) + "/log" +
            Query().add("offset", std::to_string(offset)).add("wait_s", "5").str());
        if (failures > 0) {
            progress.clear();
            context.err << "deskbox: reconnected; the log goes on from byte " << offset << "\n";
        }
        failures = 0;
        return chunk;
    } catch (const ConnectionError& error) {
        if (++failures > kMaxFollowFailures) throw;
        if (failures == 1) {
            progress.clear();
            context.err << "deskbox: " << error.what() << "; retrying from byte " << offset
                        << " (the build goes on on the server)\n";
        }
        std::this_thread::sleep_for(std::chrono::seconds(std::min(failures, 5)));
        return std::nullopt;
    }
}

void send_cancel(Context& context, const std::string& id, ProgressLine& progress) {
    progress.clear();
    context.err << "deskbox: cancelling build " << id << " (^C again to leave it)\n";
    try {
        context.client().post_json(build_path(id) + "/cancel", json());
    } catch (const ConnectionError&) {
        // The log's end says what became of it.
    }
}

// Prints the build's log from the start as it grows, until the build has finished; returns the
// finished build. A dropped connection resumes from the last byte printed.
json follow_build(Context& context, const std::string& id, const FollowOptions& options) {
    auto& client = context.client();
    client.set_request_timeout(60s);  // a long poll waits at most 5 s on the server
    ProgressLine progress(context.err, stderr_is_terminal(context));
    const auto started = Clock::now();
    auto status_fetched = started - 1h;
    json build = json::object();
    std::uint64_t offset = 0;
    int failures = 0;
    bool at_line_start = true, cancel_sent = false;
    StepNote note;
    while (true) {
        if (options.cancel_on_interrupt && interrupted && !cancel_sent) {
            send_cancel(context, id, progress);
            cancel_sent = true;
        }
        auto chunk = poll_log(context, id, offset, failures, progress);
        if (!chunk) continue;
        const std::string text = chunk->value("text", "");
        const auto next = chunk->value("next_offset", offset);
        if (next < offset || (next == offset && !text.empty()))
            throw std::runtime_error("unexpected answer from deskboxd: the log went from byte " +
                                     std::to_string(offset) + " to " + std::to_string(next));
        if (!text.empty()) {
            if (options.print_log) {
                progress.clear();
                context.out << text << std::flush;
            }
            at_line_start = text.back() == '\n';
            note.feed(text);
        }
        offset = next;
        if (chunk->value("complete", false)) break;
        if (progress.enabled() && (at_line_start || !options.print_log) &&
            Clock::now() - status_fetched >= 1s) {
            try {
                build = client.get_json(build_path(id));
                status_fetched = Clock::now();
            } catch (const ConnectionError&) {
            }
            progress.show(progress_text(
                build, note.note(), std::chrono::duration<double>(Clock::now() - started).count()));
        }
        // A log that grows by a little at a time is read five times a second, not in a spin.
        if (!text.empty() && text.size() < 4096) std::this_thread::sleep_for(200ms);
    }
    progress.clear();
    if (options.print_log && !at_line_start) context.out << "\n" << std::flush;
    build = get_with_retries(context, build_path(id));
    if (cancel_sent) build["interrupted"] = true;
    return build;
}

// Says how the build ended; returns the exit code.
int report(Context& context, const json& build, bool log_printed) {
    const std::string status = build.value("status", "");
    const std::string ref = build.value("template", "");
    const bool import = build.value("kind", "") == "import";
    if (status == "succeeded") {
        context.err << "deskbox: " << (import ? "imported " : "built ") << ref << " in "
                    << seconds_text(build.value("seconds", 0.0));
        const int cached = build.value("cached_steps", 0), steps = build.value("steps", 0);
        if (cached > 0) context.err << " (" << cached << " of " << steps << " steps cached)";
        context.err << "\n";
        return kExitOk;
    }
    const json error = build.value("error", json::object());
    context.err << "deskbox: error: build " << build.value("build_id", "") << " of " << ref << " "
                << status << ": " << error.value("message", "no reason given") << " ["
                << error.value("code", "?") << "]\n";
    if (error.value("step", 0) > 0)
        context.err << "deskbox: failing step: " << error.value("step", 0) << "/"
                    << build.value("steps", 0) << " " << error.value("instruction", "") << "\n";
    if (error.contains("exit_code") && error["exit_code"].is_number_integer())
        context.err << "deskbox: exit code: " << error["exit_code"].get<int>() << "\n";
    if (!log_printed && error.contains("log_tail")) {
        std::string tail = error.value("log_tail", "");
        context.err << "deskbox: the log's end:\n" << tail;
        if (!tail.empty() && tail.back() != '\n') context.err << "\n";
    }
    if (build.value("interrupted", false)) return kExitInterrupted;
    return kExitApiError;
}

// After the request that queued it: detach, or follow and report.
int follow_and_report(Context& context, const ParsedArgs& args, const json& started) {
    const std::string id = required_string(started, "build_id", "the build answer");
    if (args.has("--detach")) {
        context.out << id << "\n";
        return kExitOk;
    }
    context.err << "deskbox: build " << id << " of " << started.value("template", "")
                << " queued; following its log (^C cancels it)\n";
    const bool print_log = !args.has("--quiet");
    return report(context, follow_build(context, id, {print_log, true}), print_log);
}

// --- commands -----------------------------------------------------------------------------

void put_commands(json& body, const ParsedArgs& args) {
    if (auto start = args.get("--start-cmd")) body["start_cmd"] = *start;
    if (auto ready = args.get("--ready-cmd")) body["ready_cmd"] = *ready;
    if (auto timeout = args.get("--timeout"))
        body["timeout_s"] = parse_integer(*timeout, "--timeout", 10, 86400);
}

std::vector<OptionSpec> follow_options() {
    return {{"--start-cmd", ""}, {"--ready-cmd", ""},      {"--timeout", ""},
            {"--part-mb", ""},   {"--quiet", "-q", false}, {"--detach", "-d", false}};
}

int template_build(Context& context, const CommandTokens& tokens) {
    auto options = follow_options();
    options.insert(
        options.end(),
        {{"--file", "-f"}, {"--build-arg", ""}, {"--no-cache", "", false}, {"--network", ""}});
    Command c(context, "template", tokens, options);
    c.expect(2, 3);
    const fs::path dir = c.args.positional.size() > 2 ? c.arg(2) : ".";
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw UsageError("CONTEXT_DIR: " + dir.string() + " is not a directory",
                         usage_of("template"));
    json body = json::object();
    put_ref(body, c.arg(1));
    json build_args = json::object();
    for (const auto& entry : c.args.all("--build-arg")) {
        // NAME=VALUE, or NAME alone: its value here, as docker build takes it.
        const auto eq = entry.find('=');
        if (eq == 0 || entry.empty())
            throw UsageError("--build-arg: expected NAME=VALUE, got \"" + entry + "\"");
        if (eq != std::string::npos) {
            build_args[entry.substr(0, eq)] = entry.substr(eq + 1);
        } else if (const char* value = std::getenv(entry.c_str())) {
            build_args[entry] = value;
        }
    }
    if (!build_args.empty()) body["build_args"] = build_args;
    if (c.args.has("--no-cache")) body["no_cache"] = true;
    if (auto network = c.args.get("--network")) {
        if (*network == "on" || *network == "off") {
            body["network"] = *network == "on";
        } else {
            json policy = json::parse(*network, nullptr, false);
            if (policy.is_discarded())
                throw UsageError(
                    "--network: expected on, off or a JSON policy like "
                    "'{\"allow\":[\"deb.debian.org\"]}', got \"" +
                    *network + "\"");
            body["network"] = policy;
        }
    }
    put_commands(body, c.args);
    const auto part_bytes = static_cast<std::size_t>(part_bytes_of(c.args));

    const auto dockerfile = choose_dockerfile(dir, c.args.get("--file"));
    std::vector<std::string> always = {".dockerignore"};
    if (dockerfile.path_in_context) {
        always.push_back(*dockerfile.path_in_context);
        if (*dockerfile.path_in_context != "Dockerfile")
            body["dockerfile_path"] = *dockerfile.path_in_context;
    } else {
        body["dockerfile"] = *dockerfile.text;
    }
    IgnorePatterns ignore;
    if (fs::exists(dir / ".dockerignore", ec))
        ignore = IgnorePatterns::parse(read_local_file((dir / ".dockerignore").string()));
    const auto listing = list_context(dir, ignore, always);
    context.err << "deskbox: sending the build context: " << listing.files
                << (listing.files == 1 ? " file, " : " files, ") << human_bytes(listing.bytes);
    if (listing.excluded) context.err << " (" << listing.excluded << " left out by .dockerignore)";
    context.err << "\n";

    InterruptCatcher catcher;
    try {
        TarStream tar(dir, listing.entries, throw_if_interrupted);
        const auto upload = upload_parts(
            context.client(), [&](char* b, std::size_t n) { return tar.read(b, n); }, part_bytes,
            throw_if_interrupted);
        tar.finish();
        body["upload_id"] = upload.id;
        context.client().set_request_timeout(std::chrono::minutes(10));
        json started = context.client().post_json("/v1/templates/builds", body);
        return follow_and_report(context, c.args, started);
    } catch (const Interrupted&) {
        context.err << "deskbox: interrupted before the build started\n";
        return kExitInterrupted;
    }
}

int template_import(Context& context, const CommandTokens& tokens) {
    auto options = follow_options();
    options.push_back({"--format", ""});
    options.push_back({"--image", ""});
    Command c(context, "template", tokens, options);
    // An image the server pulls from a registry it allows, or an archive to upload: one of them.
    const auto image = c.args.get("--image");
    c.expect(image ? 2 : 3, image ? 2 : 3);
    json body = json::object();
    put_ref(body, c.arg(1));
    if (auto format = c.args.get("--format")) {
        if (image) throw UsageError("--format is for an archive, not --image");
        if (*format != "oci-archive" && *format != "docker-archive")
            throw UsageError("--format: expected oci-archive or docker-archive, got \"" + *format +
                             "\"");
        body["format"] = *format;
    }
    if (image) body["image"] = *image;
    put_commands(body, c.args);
    const auto part_bytes = static_cast<std::size_t>(part_bytes_of(c.args));
    const std::string file = image ? "" : c.arg(2);
    std::ifstream in;
    std::istream* source = &context.in;
    if (!image && file != "-") {
        in.open(file, std::ios::binary);
        if (!in) throw std::runtime_error("cannot read " + file + ": " + std::strerror(errno));
        source = &in;
    }
    InterruptCatcher catcher;
    try {
        if (!image) {
            const auto upload = upload_parts(
                context.client(),
                [&](char* buffer, std::size_t size) {
                    source->read(buffer, static_cast<std::streamsize>(size));
                    if (source->bad()) throw std::runtime_error("cannot read " + file);
                    return static_cast<std::size_t>(source->gcount());
                },
                part_bytes, throw_if_interrupted);
            body["upload_id"] = upload.id;
            context.err << "deskbox: sent " << human_bytes(upload.bytes) << " of "
                        << (file == "-" ? "stdin" : file) << "\n";
        }
        context.client().set_request_timeout(std::chrono::minutes(10));
        json started = context.client().post_json("/v1/templates/imports", body);
        return follow_and_report(context, c.args, started);
    } catch (const Interrupted&) {
        context.err << "deskbox: interrupted before the import started\n";
        return kExitInterrupted;
    }
}

int template_list(Context& context, const CommandTokens& tokens) {
    Command c(context, "template", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    json answer = context.client().get_json("/v1/templates");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {
        {"TEMPLATE", "KIND", "SIZE", "BUILT", "RUNTIMES"}};
    for (const auto& item : answer.value("items", json::array())) {
        std::string runtimes;
        for (const auto& runtime : item.value("runtimes", json::array()))
            if (runtime.is_string())
                runtimes += (runtimes.empty() ? "" : ",") + runtime.get<std::string>();
        const bool sized = item.contains("bytes") && item["bytes"].is_number_unsigned();
        rows.push_back({text_of(item, "template"), text_of(item, "kind"),
                        sized ? human_bytes(item["bytes"].get<std::uint64_t>()) : "-",
                        text_of(item, "created_at"), runtimes.empty() ? "-" : runtimes});
    }
    print_table(context.out, rows);
    return kExitOk;
}

int template_inspect(Context& context, const CommandTokens& tokens) {
    Command c(context, "template", tokens, {});
    c.expect(2, 2);
    context.out << context.client().get_json(template_path(c.arg(1))).dump(2) << "\n";
    return kExitOk;
}

int template_remove(Context& context, const CommandTokens& tokens) {
    Command c(context, "template", tokens, {});
    c.expect(2, SIZE_MAX);
    return delete_each(context, c, template_path);
}

int template_builds(Context& context, const CommandTokens& tokens) {
    Command c(context, "template", tokens, {{"--json", "", false}});
    c.expect(1, 1);
    json answer = context.client().get_json("/v1/templates/builds");
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {
        {"BUILD", "TEMPLATE", "KIND", "STATUS", "STEP", "CREATED", "SECONDS"}};
    for (const auto& b : answer.value("builds", json::array())) {
        const int steps = b.value("steps", 0);
        rows.push_back(
            {text_of(b, "build_id"), text_of(b, "template"), text_of(b, "kind"),
             text_of(b, "status"),
             steps ? std::to_string(b.value("step", 0)) + "/" + std::to_string(steps) : "-",
             text_of(b, "created_at"),
             b.contains("seconds") ? seconds_text(b.value("seconds", 0.0)) : "-"});
    }
    print_table(context.out, rows);
    return kExitOk;
}

int template_logs(Context& context, const CommandTokens& tokens) {
    Command c(context, "template", tokens, {{"--follow", "-f", false}});
    c.expect(2, 2);
    const std::string& id = c.arg(1);
    if (c.args.has("--follow")) return report(context, follow_build(context, id, {}), true);
    // What there is now, in pieces of at most a MiB.
    std::uint64_t offset = 0;
    bool at_line_start = true;
    while (true) {
        json chunk = context.client().get_json(build_path(id) + "/log" +
                                               Query().add("offset", std::to_string(offset)).str());
        const std::string text = chunk.value("text", "");
        const auto next = chunk.value("next_offset", offset);
        if (!text.empty()) {
            context.out << text;
            at_line_start = text.back() == '\n';
        }
        if (next <= offset || chunk.value("complete", false)) break;
        offset = next;
    }
    if (!at_line_start) context.out << "\n";
    return kExitOk;
}

int template_cancel(Context& context, const CommandTokens& tokens) {
    Command c(context, "template", tokens, {});
    c.expect(2, SIZE_MAX);
    context.client().set_request_timeout(60s);  // the server waits for the engine to stop
    int status = kExitOk;
    for (std::size_t i = 1; i < c.args.positional.size(); ++i) {
        const std::string& id = c.arg(i);
        try {
            json build = context.client().post_json(build_path(id) + "/cancel", json());
            context.out << id << "\t" << text_of(build, "status") << "\n";
        } catch (const ApiError& error) {
            context.err << "deskbox: error: " << id << ": " << error.what() << "\n";
            status = kExitApiError;
        }
    }
    return status;
}

}  // namespace

int command_template(Context& context, const CommandTokens& tokens) {
    const std::string verb = tokens.empty() ? "" : tokens[0];
    if (verb == "build") return template_build(context, tokens);
    if (verb == "import") return template_import(context, tokens);
    if (verb == "ls" || verb == "list") return template_list(context, tokens);
    if (verb == "inspect") return template_inspect(context, tokens);
    if (verb == "rm") return template_remove(context, tokens);
    if (verb == "builds") return template_builds(context, tokens);
    if (verb == "logs") return template_logs(context, tokens);
    if (verb == "cancel") return template_cancel(context, tokens);
    // Lets --help through; anything else is a usage error naming the verbs.
    Command c(context, "template", tokens, {});
    throw UsageError("expected template build, import, ls, inspect, rm, builds, logs or cancel",
                     usage_of("template"));
}

}  // namespace deskbox::cli
