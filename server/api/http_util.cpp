#include "server/api/http_util.hpp"

#include <climits>
#include <vector>

#include "common/parse_integer.hpp"
#include "common/utf8.hpp"
#include "server/api/request_guard.hpp"

namespace deskbox::server {

using nlohmann::json;

namespace {
int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

HttpResponse json_response(unsigned status, const json& body) {
    HttpResponse res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
    res.prepare_payload();
    return res;
}

std::string url_decode(std::string_view in, bool plus_is_space) {
    std::string out;
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '%' && i + 2 < in.size() && hex_value(in[i + 1]) >= 0 &&
            hex_value(in[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(in[i + 1]) * 16 + hex_value(in[i + 2]));
            i += 2;
        } else if (in[i] == '%') {
            throw bad_request("", "malformed percent-encoding in the URL");
        } else if (plus_is_space && in[i] == '+') {
            out += ' ';
        } else {
            out += in[i];
        }
    }
    return out;
}

std::map<std::string, std::string> parse_query(std::string_view q) {
    std::map<std::string, std::string> out;
    while (!q.empty()) {
        auto amp = q.find('&');
        auto part = q.substr(0, amp);
        q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
        if (part.empty()) continue;
        auto eq = part.find('=');
        std::string key = url_decode(part.substr(0, eq), true);
        std::string value =
            eq == std::string_view::npos ? "" : url_decode(part.substr(eq + 1), true);
        out[key] = value;
    }
    return out;
}

namespace {

// Where in a JSON text the parser stopped: follows objects and arrays through SAX events, so
// at the parse error it can name the member (actions[2].text) it was reading.
class JsonLocator : public json::json_sax_t {
  public:
    // The path of the value the parser was in when it failed; `in_key` is set when it failed
    // while reading a member name (the path then names the object).
    std::string path;
    bool in_key = false;

    bool null() override { return value(); }
    bool boolean(bool) override { return value(); }
    bool number_integer(number_integer_t) override { return value(); }
    bool number_unsigned(number_unsigned_t) override { return value(); }
    bool number_float(number_float_t, const string_t&) override { return value(); }
    bool string(string_t&) override { return value(); }
    bool binary(binary_t&) override { return value(); }
    bool start_object(std::size_t) override { return open(true); }
    bool start_array(std::size_t) override { return open(false); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }
    bool key(string_t& name) override {
        frames_.back().key = name;
        frames_.back().awaiting_value = true;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
        path.clear();
        for (std::size_t i = 0; i < frames_.size(); ++i) {
            const Frame& f = frames_[i];
            bool innermost = i + 1 == frames_.size();
            if (f.object) {
                if (innermost && !f.awaiting_value) {
                    in_key = true;
                    break;
                }
                path += (path.empty() ? "" : ".") + utf8::escape_invalid(f.key);
            } else {
                // The innermost array's element being read has not been counted yet.
                std::size_t index = innermost ? f.elements : f.elements - 1;
                path += "[" + std::to_string(index) + "]";
            }
        }
        return false;
    }

  private:
    struct Frame {
        bool object;
        std::string key;
        std::size_t elements = 0;
        bool awaiting_value = false;
    };
    bool value() {
        if (!frames_.empty()) {
            if (frames_.back().object)
                frames_.back().awaiting_value = false;
            else
                ++frames_.back().elements;
        }
        return true;
    }
    bool open(bool object) {
        if (!frames_.empty() && !frames_.back().object) ++frames_.back().elements;
        frames_.push_back(Frame{object, {}, 0, false});
        return true;
    }
    bool close() {
        frames_.pop_back();
        if (!frames_.empty() && frames_.back().object) frames_.back().awaiting_value = false;
        return true;
    }
    std::vector<Frame> frames_;
};

}  // namespace

void check_utf8(std::string_view bytes, const std::string& field, const std::string& what) {
    if (auto at = utf8::first_invalid(bytes))
        throw ApiError(400, "invalid_utf8",
                       what + " is not valid UTF-8 (byte " + std::to_string(*at) + ")", field);
}

void check_body_utf8(std::string_view body) {
    auto at = utf8::first_invalid(body);
    if (!at) return;
    // Parse only up to the bad byte: the parser then fails there, with the locator inside the
    // member that holds it (nlohmann would also refuse the byte, but names no member).
    JsonLocator locator;
    json::sax_parse(body.substr(0, *at + 1), &locator);
    std::string where = locator.in_key ? (locator.path.empty() ? std::string("a member name")
                                                               : "a member name in " + locator.path)
                                       : locator.path;
    throw ApiError(400, "invalid_utf8",
                   "request body is not valid UTF-8 (byte " + std::to_string(*at) +
                       (where.empty() ? std::string() : ", in " + where) + ")",
                   locator.path);
}

json parse_body(const HttpRequest& request, bool allow_empty) {
    if (request.body().empty()) {
        if (allow_empty) return json::object();
        throw bad_request("", "request body must be JSON");
    }
    check_json_content_type(request);
    check_body_utf8(request.body());
    try {
        // Depth is bounded while parsing: the code that walks a body afterwards (validation,
        // the audit line's dump) recurses, and a 64 MiB body of '[' would overflow its stack.
        return json::parse(request.body(), [](int depth, json::parse_event_t, json&) {
            // nlohmann counts the outermost value as depth 0: `depth` values nest depth + 1 deep.
            if (depth >= kMaxJsonDepth)
                throw ApiError(
                    400, "too_deep",
                    "request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
            return true;
        });
    } catch (const json::parse_error& e) {
        throw ApiError(400, "malformed_json",
                       std::string("request body is not valid JSON: ") + e.what());
    } catch (const json::out_of_range& e) {  // a number beyond a double (1e400): found by fuzzing
        throw ApiError(400, "malformed_json",
                       std::string("request body has a number out of range: ") + e.what());
    }
}

void allow_only(const std::map<std::string, std::string>& query, std::set<std::string> allowed) {
    for (auto& [k, v] : query)
        if (!allowed.count(k)) throw bad_request(k, "unknown query parameter");
}

int int_query(const std::map<std::string, std::string>& query, const std::string& name) {
    const std::string& v = query.at(name);
    auto value = parse_integer(v);
    if (!value || *value < INT_MIN || *value > INT_MAX)
        throw bad_request(name, "expected an integer, got '" + v + "'");
    return static_cast<int>(*value);
}

bool bool_query(const std::map<std::string, std::string>& query, const std::string& name,
                bool fallback) {
    auto it = query.find(name);
    if (it == query.end()) return fallback;
    const std::string& v = it->second;
    if (v == "true" || v == "1") return true;
    if (v == "false" || v == "0") return false;
    throw bad_request(name, "expected true or false, got '" + v.substr(0, 32) + "'");
}

std::string required_query(const std::map<std::string, std::string>& query,
                           const std::string& name) {
    auto it = query.find(name);
    if (it == query.end() || it->second.empty()) throw bad_request(name, "required");
    return it->second;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

}  // namespace deskbox::server
