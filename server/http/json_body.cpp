#include "server/http/json_body.hpp"

#include <vector>

#include "common/utf8.hpp"
#include "server/http/header_text.hpp"

namespace deskbox::server {

using nlohmann::json;

HttpResponse json_response(unsigned status, const json& body) {
    HttpResponse res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
    res.prepare_payload();
    return res;
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

void check_json_content_type(const HttpRequest& request) {
    auto it = request.find(http::field::content_type);
    std::string_view value = it == request.end()
                                 ? std::string_view()
                                 : std::string_view(it->value().data(), it->value().size());
    const std::string type = ascii_lowercase(trim_blanks(value.substr(0, value.find(';'))));
    if (type == "application/json" || (type.size() > 5 && type.ends_with("+json"))) return;
    const bool from_page = request.find(http::field::origin) != request.end();
    if (!from_page && (type.empty() || type == "application/x-www-form-urlencoded")) return;
    throw ApiError(415, "unsupported_media_type",
                   "a JSON request body needs Content-Type: application/json" +
                       (type.empty() ? std::string() : " (got '" + type.substr(0, 64) + "')"),
                   "content-type");
}

}  // namespace deskbox::server
