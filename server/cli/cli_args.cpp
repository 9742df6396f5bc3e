#include "server/cli/cli_args.hpp"

#include <cctype>
#include <charconv>
#include <cmath>

namespace deskbox::cli {

namespace {

bool looks_like_negative_number(const std::string& token) {
    return token.size() >= 2 && token[0] == '-' &&
           (std::isdigit(static_cast<unsigned char>(token[1])) || token[1] == '.');
}

const OptionSpec* find_option(const std::vector<OptionSpec>& options, const std::string& name) {
    for (const auto& option : options) {
        if (option.name == name || (!option.short_name.empty() && option.short_name == name)) {
            return &option;
        }
    }
    return nullptr;
}

}  // namespace

std::optional<std::string> ParsedArgs::get(const std::string& name) const {
    auto it = values.find(name);
    if (it == values.end() || it->second.empty()) return std::nullopt;
    return it->second.back();
}

std::vector<std::string> ParsedArgs::all(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? std::vector<std::string>{} : it->second;
}

ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& tokens,
                      const std::vector<OptionSpec>& options,
                      std::optional<std::size_t> rest_after) {
    ParsedArgs parsed;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::string& token = tokens[i];
        if (token == "--") {
            for (++i; i < tokens.size(); ++i) {
                (rest_after ? parsed.rest : parsed.positional).push_back(tokens[i]);
            }
            break;
        }
        bool is_option = token.size() >= 2 && token[0] == '-' && !looks_like_negative_number(token);
        if (!is_option) {
            if (rest_after && parsed.positional.size() >= *rest_after) {
                parsed.rest.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i), tokens.end());
                break;
            }
            parsed.positional.push_back(token);
            continue;
        }
        std::string name = token;
        std::optional<std::string> inline_value;
        if (auto eq = token.find('='); token.rfind("--", 0) == 0 && eq != std::string::npos) {
            name = token.substr(0, eq);
            inline_value = token.substr(eq + 1);
        }
        const OptionSpec* option = find_option(options, name);
        if (!option) throw UsageError("unknown option " + name + " for '" + command + "'");
        if (!option->takes_value) {
            if (inline_value) throw UsageError(option->name + " takes no value");
            parsed.values[option->name].push_back("");
            continue;
        }
        if (inline_value) {
            parsed.values[option->name].push_back(*inline_value);
        } else if (i + 1 < tokens.size()) {
            parsed.values[option->name].push_back(tokens[++i]);
        } else {
            throw UsageError(option->name + " needs a value");
        }
    }
    return parsed;
}

void expect_positionals(const ParsedArgs& args, std::size_t min, std::size_t max,
                        const std::string& usage) {
    if (args.positional.size() < min) throw UsageError("missing arguments", usage);
    if (args.positional.size() > max) {
        throw UsageError("unexpected argument \"" + args.positional[max] + "\"", usage);
    }
}

long long parse_integer(const std::string& text, const std::string& what, long long min,
                        long long max) {
    long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec == std::errc::invalid_argument || end != text.data() + text.size()) {
        throw UsageError(what + ": expected an integer, got \"" + text + "\"");
    }
    if (ec == std::errc::result_out_of_range || value < min || value > max) {
        throw UsageError(what + ": must be from " + std::to_string(min) + " to " +
                         std::to_string(max) + ", got " + text);
    }
    return value;
}

double parse_number(const std::string& text, const std::string& what, double min, double max) {
    double value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() ||
        !std::isfinite(value)) {
        throw UsageError(what + ": expected a number, got \"" + text + "\"");
    }
    if (value < min || value > max) {
        throw UsageError(what + ": must be from " + std::to_string(min) + " to " +
                         std::to_string(max) + ", got " + text);
    }
    return value;
}

std::pair<int, int> parse_size(const std::string& text, const std::string& what) {
    auto x = text.find_first_of("xX");
    if (x == std::string::npos) {
        throw UsageError(what + ": expected WIDTHxHEIGHT like 1280x800, got \"" + text + "\"");
    }
    try {
        return {static_cast<int>(parse_integer(text.substr(0, x), what, 1, 1 << 16)),
                static_cast<int>(parse_integer(text.substr(x + 1), what, 1, 1 << 16))};
    } catch (const UsageError&) {
        throw UsageError(what + ": expected WIDTHxHEIGHT like 1280x800, got \"" + text + "\"");
    }
}

std::pair<std::string, std::string> parse_key_value(const std::string& text,
                                                    const std::string& what) {
    auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0) {
        throw UsageError(what + ": expected NAME=VALUE, got \"" + text + "\"");
    }
    return {text.substr(0, eq), text.substr(eq + 1)};
}

}  // namespace deskbox::cli
