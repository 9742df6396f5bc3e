// Command-line parsing for the deskbox CLI: options anywhere after the command, "--name value"
// or "--name=value", "--" ending options, negative numbers taken as arguments (scroll dy -3).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace deskbox::cli {

// Bad command line: exit code 2. `usage` is the command's synopsis, shown with the message.
class UsageError : public std::runtime_error {
  public:
    explicit UsageError(const std::string& message, std::string usage = {})
        : std::runtime_error(message), usage_(std::move(usage)) {}
    const std::string& usage() const { return usage_; }

  private:
    std::string usage_;
};

struct OptionSpec {
    std::string name;        // "--size"
    std::string short_name;  // "-o", or empty
    bool takes_value = true;
};

struct ParsedArgs {
    std::vector<std::string> positional;
    std::vector<std::string> rest;  // the command line to run (exec): after "--" or its first word
    std::map<std::string, std::vector<std::string>> values;  // by long name; flags hold ""

    bool has(const std::string& name) const { return values.count(name) != 0; }
    std::optional<std::string> get(const std::string& name) const;  // the last value given
    std::vector<std::string> all(const std::string& name) const;
};

// Parses `tokens` for `command` (named in messages). With `rest_after` = N, the first
// positional beyond the N-th and everything after it go to `rest` untouched (so
// `exec ID ls -la` works); "--" then also starts `rest`. Without it, "--" just ends options.
ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& tokens,
                      const std::vector<OptionSpec>& options,
                      std::optional<std::size_t> rest_after = std::nullopt);

// Throws UsageError if there are fewer than `min` or more than `max` positionals.
void expect_positionals(const ParsedArgs& args, std::size_t min, std::size_t max,
                        const std::string& usage);

// Strict number parsing: the whole text, in range; errors name `what`.
long long parse_integer(const std::string& text, const std::string& what, long long min,
                        long long max);
double parse_number(const std::string& text, const std::string& what, double min, double max);
// "1280x800" -> {1280, 800}.
std::pair<int, int> parse_size(const std::string& text, const std::string& what);
// "NAME=VALUE" -> {NAME, VALUE}; NAME must not be empty.
std::pair<std::string, std::string> parse_key_value(const std::string& text,
                                                    const std::string& what);

}  // namespace deskbox::cli
