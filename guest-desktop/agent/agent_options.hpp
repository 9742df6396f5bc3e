// deskbox-agent's command line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace deskbox::agent {

// Where the agent channel comes from.
struct ChannelSpec {
    enum class Kind { stdio, unix_listen, unix_connect, device };
    Kind kind = Kind::stdio;
    std::string path;  // socket or character device
};

struct AgentOptions {
    ChannelSpec channel;
    std::optional<std::string> attach_display;  // use this X display instead of starting Xvfb
    int width = 1280;
    int height = 800;
    int dpi = 96;
    std::optional<std::vector<std::string>> window_manager;  // nullopt: default; empty: none
    std::vector<std::vector<std::string>> autostart;
    std::map<std::string, std::string> app_env;
    int max_fps = 30;
    // Xvfb without GLX: no Mesa loaded (about 11 MiB less anonymous memory per desktop, issue
    // 33); for templates whose apps draw no OpenGL.
    bool glx = true;
    std::string log_dir;
    bool once = false;  // serve one connection, then exit
};

// Parses argv (without argv[0]). Throws std::invalid_argument naming the flag and the reason.
AgentOptions parse_agent_options(const std::vector<std::string>& args);

// Splits a command line on whitespace, honouring '...' and "..." quotes.
std::vector<std::string> split_command(const std::string& line);

extern const char* const kAgentUsage;

}  // namespace deskbox::agent
