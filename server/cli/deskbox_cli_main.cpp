// `deskbox`: the command-line client of deskboxd's HTTP API (see cli_commands.hpp).
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "server/cli/cli_commands.hpp"

int main(int argc, char** argv) {
    std::ios::sync_with_stdio(false);
    deskbox::cli::Environment environment;
    if (const char* server = std::getenv("DESKBOX_SERVER"); server && *server) {
        environment.server = server;
    }
    if (const char* key = std::getenv("DESKBOX_API_KEY"); key && *key) environment.api_key = key;
    std::vector<std::string> args(argv + 1, argv + argc);
    int code = deskbox::cli::run_cli(args, environment, std::cout, std::cerr, std::cin);
    std::cout.flush();
    return code;
}
