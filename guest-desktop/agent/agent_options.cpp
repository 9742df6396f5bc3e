#include "guest-desktop/agent/agent_options.hpp"

#include <stdexcept>

#include "common/parse_integer.hpp"

namespace deskbox::agent {

const char* const kAgentUsage = R"(usage: deskbox-agent [options]
  --channel SPEC        stdio (default) | unix-listen:PATH | unix-connect:PATH | device:PATH
  --display :N          attach to a running X display instead of starting Xvfb
  --size WxH            screen size of the Xvfb it starts (default 1280x800)
  --dpi N               (default 96)
  --wm "CMD ARGS"       window manager ("none" for none; default openbox when installed)
  --autostart "CMD"     an app to start once the desktop is ready (repeatable)
  --env K=V             environment for the window manager and apps (repeatable)
  --max-fps N           damage capture rate cap (default 30)
  --no-glx              start Xvfb without the GLX extension (no Mesa: less memory)
  --log-dir DIR         where the session's logs go
  --once                serve one connection and exit
  --init                run as PID 1: reap orphans, forward signals, run the agent as a child
)";

namespace {

int parse_int(const std::string& flag, const std::string& text, int min, int max) {
    auto value = parse_integer(text);
    if (!value) throw std::invalid_argument(flag + ": expected an integer, got '" + text + "'");
    if (*value < min || *value > max)
        throw std::invalid_argument(flag + ": " + text + " is outside " + std::to_string(min) +
                                    ".." + std::to_string(max));
    return static_cast<int>(*value);
}

ChannelSpec parse_channel(const std::string& text) {
    if (text == "stdio") return {};
    auto colon = text.find(':');
    std::string scheme = text.substr(0, colon);
    std::string path = colon == std::string::npos ? "" : text.substr(colon + 1);
    ChannelSpec spec;
    if (scheme == "unix-listen")
        spec.kind = ChannelSpec::Kind::unix_listen;
    else if (scheme == "unix-connect")
        spec.kind = ChannelSpec::Kind::unix_connect;
    else if (scheme == "device")
        spec.kind = ChannelSpec::Kind::device;
    else
        throw std::invalid_argument("--channel: unknown kind '" + scheme + "'");
    if (path.empty()) throw std::invalid_argument("--channel: " + scheme + " needs a path");
    spec.path = path;
    return spec;
}

}  // namespace

std::vector<std::string> split_command(const std::string& line) {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    char quote = 0;
    for (char c : line) {
        if (quote) {
            if (c == quote)
                quote = 0;
            else
                word += c;
        } else if (c == '\'' || c == '"') {
            quote = c;
            in_word = true;
        } else if (c == ' ' || c == '\t' || c == '\n') {
            if (in_word) words.push_back(std::move(word));
            word.clear();
            in_word = false;
        } else {
            word += c;
            in_word = true;
        }
    }
    if (quote) throw std::invalid_argument("unterminated quote in '" + line + "'");
    if (in_word) words.push_back(std::move(word));
    return words;
}

AgentOptions parse_agent_options(const std::vector<std::string>& args) {
    AgentOptions o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& flag = args[i];
        auto value = [&]() -> const std::string& {
            if (i + 1 >= args.size()) throw std::invalid_argument(flag + ": needs a value");
            return args[++i];
        };
        if (flag == "--channel") {
            o.channel = parse_channel(value());
        } else if (flag == "--display") {
            o.attach_display = value();
            if (o.attach_display->empty() || (*o.attach_display)[0] != ':')
                throw std::invalid_argument("--display: expected ':N'");
        } else if (flag == "--size") {
            const std::string& v = value();
            auto x = v.find('x');
            if (x == std::string::npos) throw std::invalid_argument("--size: expected WxH");
            o.width = parse_int("--size", v.substr(0, x), 64, 8192);
            o.height = parse_int("--size", v.substr(x + 1), 64, 8192);
        } else if (flag == "--dpi") {
            o.dpi = parse_int(flag, value(), 24, 600);
        } else if (flag == "--wm") {
            const std::string& v = value();
            o.window_manager = v == "none" ? std::vector<std::string>{} : split_command(v);
        } else if (flag == "--autostart") {
            auto argv = split_command(value());
            if (argv.empty()) throw std::invalid_argument("--autostart: empty command");
            o.autostart.push_back(std::move(argv));
        } else if (flag == "--env") {
            const std::string& v = value();
            auto eq = v.find('=');
            if (eq == std::string::npos || eq == 0)
                throw std::invalid_argument("--env: expected K=V, got '" + v + "'");
            o.app_env[v.substr(0, eq)] = v.substr(eq + 1);
        } else if (flag == "--max-fps") {
            o.max_fps = parse_int(flag, value(), 1, 240);
        } else if (flag == "--log-dir") {
            o.log_dir = value();
        } else if (flag == "--no-glx") {
            o.glx = false;
        } else if (flag == "--once") {
            o.once = true;
        } else {
            throw std::invalid_argument("unknown option '" + flag + "'");
        }
    }
    return o;
}

}  // namespace deskbox::agent
