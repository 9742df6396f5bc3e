// The CLI's screen commands: wait, locate, ocr, compare (POST /v1/sandboxes/ID/...), and the
// target options of click and move. Scripts branch on the exit code: 0 matched / found /
// identical, 3 not (kExitNoMatch), 1 an API error, 2 a usage error.
#include <iostream>
#include <sstream>

#include "common/base64.hpp"
#include "server/cli/cli_commands.hpp"

namespace deskbox::cli {

using nlohmann::json;

namespace {

// A PNG file as the API takes it.
std::string read_png(const std::string& path) {
    return base64_encode(read_local_file(path));
}

// "X,Y,W,H" -> [X, Y, W, H].
json parse_rect(const std::string& text, const std::string& what) {
    json out = json::array();
    std::stringstream in(text);
    std::string part;
    while (std::getline(in, part, ',')) out.push_back(parse_integer(part, what, 0, 32767));
    if (out.size() != 4)
        throw UsageError(what + ": expected X,Y,WIDTH,HEIGHT, got \"" + text + "\"");
    return out;
}

const std::vector<OptionSpec> kSeekOptions = {{"--image", ""},        {"--text", ""},
                                              {"--region", ""},       {"--threshold", ""},
                                              {"--exact", "", false}, {"--grayscale", "", false},
                                              {"--lang", ""}};

// The seek fields (image or text, and how) of locate, wait and targets.
json seek_body(const ParsedArgs& args) {
    json body = json::object();
    if (auto image = args.get("--image")) body["image"] = read_png(*image);
    if (auto text = args.get("--text")) body["text"] = *text;
    if (auto region = args.get("--region")) body["region"] = parse_rect(*region, "--region");
    if (auto threshold = args.get("--threshold"))
        body["threshold"] = parse_number(*threshold, "--threshold", 0, 1);
    if (args.has("--exact")) body["exact"] = true;
    if (args.has("--grayscale")) body["grayscale"] = true;
    if (auto lang = args.get("--lang")) body["lang"] = *lang;
    return body;
}

std::vector<OptionSpec> with(std::vector<OptionSpec> options, const std::vector<OptionSpec>& more) {
    options.insert(options.end(), more.begin(), more.end());
    return options;
}

std::string match_line(const json& m) {
    std::ostringstream line;
    line << m.value("x", 0) << " " << m.value("y", 0) << " " << m.value("width", 0) << " "
         << m.value("height", 0) << " score " << m.value("score", 0.0);
    if (m.contains("text")) line << " " << m["text"].get<std::string>();
    return line.str();
}

json post(Context& context, const std::string& id, const char* route, const json& body) {
    return context.client().post_json(sandbox_path(id) + "/" + route, body);
}

}  // namespace

int command_wait(Context& context, const std::vector<std::string>& tokens) {
    Command c(
        context, "wait", tokens,
        with(kSeekOptions,
             {{"--until", ""}, {"--timeout-ms", ""}, {"--stable-ms", ""}, {"--json", "", false}}));
    c.expect(1, 1);
    json body = seek_body(c.args);
    body["until"] = c.args.get("--until").value_or(body.contains("image")  ? "image"
                                                   : body.contains("text") ? "text"
                                                                           : "change");
    const long long timeout_ms =
        c.args.get("--timeout-ms")
            ? parse_integer(*c.args.get("--timeout-ms"), "--timeout-ms", 0, 120000)
            : 10000;
    body["timeout_ms"] = timeout_ms;
    if (auto stable = c.args.get("--stable-ms"))
        body["stable_ms"] = parse_integer(*stable, "--stable-ms", 1, 60000);
    // The server answers at the timeout; the connection must outlast it.
    context.client().set_request_timeout(std::chrono::milliseconds(timeout_ms + 30000));
    json answer = post(context, c.arg(0), "wait", body);
    const bool matched = answer.value("matched", false);
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
    } else {
        context.out << (matched ? "matched" : "timed out") << " after "
                    << answer.value("elapsed_ms", 0) << " ms";
        if (answer.contains("match")) context.out << ": " << match_line(answer["match"]);
        context.out << "\n";
    }
    return matched ? kExitOk : kExitNoMatch;
}

int command_locate(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "locate", tokens,
              with(kSeekOptions, {{"--max-results", ""}, {"--json", "", false}}));
    c.expect(1, 1);
    json body = seek_body(c.args);
    if (auto max = c.args.get("--max-results"))
        body["max_results"] = parse_integer(*max, "--max-results", 1, 100);
    json answer = post(context, c.arg(0), "locate", body);
    const json matches = answer.value("matches", json::array());
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
    } else {
        for (const auto& m : matches) context.out << match_line(m) << "\n";
    }
    return matches.empty() ? kExitNoMatch : kExitOk;
}

int command_ocr(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "ocr", tokens,
              {{"--region", ""}, {"--lang", ""}, {"--min-confidence", ""}, {"--json", "", false}});
    c.expect(1, 1);
    json body = json::object();
    if (auto region = c.args.get("--region")) body["region"] = parse_rect(*region, "--region");
    if (auto lang = c.args.get("--lang")) body["lang"] = *lang;
    if (auto min = c.args.get("--min-confidence"))
        body["min_confidence"] = parse_number(*min, "--min-confidence", 0, 100);
    json answer = post(context, c.arg(0), "ocr", body);
    if (c.args.has("--json"))
        context.out << answer.dump(2) << "\n";
    else
        context.out << answer.value("text", "") << "\n";
    return kExitOk;
}

int command_compare(Context& context, const std::vector<std::string>& tokens) {
    Command c(context, "compare", tokens,
              {{"--region", ""},
               {"--mask", ""},
               {"--tolerance", ""},
               {"--diff", ""},
               {"--json", "", false}});
    c.expect(2, 2);
    json body = {{"baseline", read_png(c.arg(1))}};
    if (auto region = c.args.get("--region")) body["region"] = parse_rect(*region, "--region");
    json mask = json::array();
    for (const auto& m : c.args.all("--mask")) mask.push_back(parse_rect(m, "--mask"));
    if (!mask.empty()) body["mask"] = mask;
    if (auto tolerance = c.args.get("--tolerance"))
        body["tolerance"] = parse_integer(*tolerance, "--tolerance", 0, 255);
    const auto diff_path = c.args.get("--diff");
    if (diff_path) body["diff"] = true;
    json answer = post(context, c.arg(0), "compare", body);
    if (diff_path) {
        auto png = base64_decode(answer.value("diff_image", ""));
        if (!png) throw std::runtime_error("the server's diff_image is not base64");
        write_output(context, *diff_path, *png);
        answer.erase("diff_image");
    }
    const bool identical = answer.value("identical", false);
    if (c.args.has("--json")) {
        context.out << answer.dump(2) << "\n";
    } else if (identical) {
        context.out << "identical\n";
    } else {
        context.out << "differs: " << answer.value("changed_pixels", 0) << " pixels changed, ssim "
                    << answer.value("ssim", 0.0) << "\n";
        for (const auto& r : answer.value("changed", json::array()))
            context.out << "changed " << r[0] << "," << r[1] << "," << r[2] << "," << r[3] << "\n";
    }
    return identical ? kExitOk : kExitNoMatch;
}

const std::vector<OptionSpec>& target_options() {
    static const std::vector<OptionSpec> options =
        with(kSeekOptions, {{"--index", ""}, {"--offset", ""}, {"--timeout-ms", ""}});
    return options;
}

std::optional<json> target_of(const ParsedArgs& args) {
    if (!args.has("--image") && !args.has("--text")) return std::nullopt;
    json target = seek_body(args);
    if (auto index = args.get("--index")) target["index"] = parse_integer(*index, "--index", 0, 99);
    if (auto offset = args.get("--offset")) {
        auto comma = offset->find(',');
        if (comma == std::string::npos) throw UsageError("--offset: expected DX,DY");
        target["offset"] = {parse_integer(offset->substr(0, comma), "--offset", -32767, 32767),
                            parse_integer(offset->substr(comma + 1), "--offset", -32767, 32767)};
    }
    if (auto timeout = args.get("--timeout-ms"))
        target["timeout_ms"] = parse_integer(*timeout, "--timeout-ms", 0, 60000);
    return target;
}

}  // namespace deskbox::cli
