#include "server/sandbox/request_reader.hpp"

#include "server/sandbox/sandbox_error.hpp"

namespace deskbox::server {

using nlohmann::json;

RequestReader::RequestReader(const json& body, std::string prefix)
    : body_(body), prefix_(std::move(prefix)) {
    if (!body_.is_object())
        throw invalid_field(
            prefix_, prefix_.empty() ? "request body must be a JSON object" : "expected an object");
}

std::string RequestReader::path(const std::string& name) const {
    return prefix_.empty() ? name : prefix_ + "." + name;
}

const json* RequestReader::find(const std::string& name) {
    read_.insert(name);
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
}

std::optional<std::string> RequestReader::string(const std::string& name, std::size_t max_bytes) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw invalid_field(path(name), "expected a string");
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max_bytes)
        throw invalid_field(path(name), "longer than " + std::to_string(max_bytes) + " bytes");
    return s;
}

std::string RequestReader::required_string(const std::string& name, std::size_t max_bytes) {
    auto s = string(name, max_bytes);
    if (!s) throw invalid_field(path(name), "required");
    return *s;
}

std::optional<long long> RequestReader::integer(const std::string& name, long long min,
                                                long long max) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<long long>() < min || v->get<long long>() > max)
        throw invalid_field(path(name), "expected an integer in " + std::to_string(min) + ".." +
                                            std::to_string(max));
    return v->get<long long>();
}

std::optional<double> RequestReader::number(const std::string& name, double min, double max) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number() || v->get<double>() < min || v->get<double>() > max) {
        auto text = [](double d) {
            auto s = std::to_string(d);
            s.erase(s.find_last_not_of('0') + 1);
            if (s.back() == '.') s.pop_back();
            return s;
        };
        throw invalid_field(path(name), "expected a number in " + text(min) + ".." + text(max));
    }
    return v->get<double>();
}

std::optional<bool> RequestReader::boolean(const std::string& name) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw invalid_field(path(name), "expected true or false");
    return v->get<bool>();
}

std::optional<std::map<std::string, std::string>> RequestReader::string_map(
    const std::string& name, std::size_t max_entries) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_object()) throw invalid_field(path(name), "expected an object of strings");
    if (v->size() > max_entries)
        throw invalid_field(path(name), "more than " + std::to_string(max_entries) + " entries");
    std::map<std::string, std::string> out;
    for (const auto& [k, value] : v->items()) {
        if (!value.is_string()) throw invalid_field(path(name) + "." + k, "expected a string");
        if (k.empty() || k.find_first_of("=\0", 0, 2) != std::string::npos)
            throw invalid_field(path(name), "invalid name '" + k + "'");
        out[k] = value.get<std::string>();
    }
    return out;
}

std::optional<std::vector<std::string>> RequestReader::string_list(const std::string& name,
                                                                   std::size_t max_entries,
                                                                   std::size_t max_bytes) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_array()) throw invalid_field(path(name), "expected an array of strings");
    if (v->size() > max_entries)
        throw invalid_field(path(name), "more than " + std::to_string(max_entries) + " entries");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v->size(); ++i) {
        const json& s = (*v)[i];
        const std::string at = path(name) + "[" + std::to_string(i) + "]";
        if (!s.is_string()) throw invalid_field(at, "expected a string");
        if (s.get_ref<const std::string&>().size() > max_bytes)
            throw invalid_field(at, "longer than " + std::to_string(max_bytes) + " bytes");
        out.push_back(s.get<std::string>());
    }
    return out;
}

std::optional<std::vector<std::string>> RequestReader::command(const std::string& name) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (v->is_string()) {
        const auto& s = v->get_ref<const std::string&>();
        if (s.empty() || s.size() > 16384)
            throw invalid_field(path(name), "expected a non-empty command of at most 16 KiB");
        return std::vector<std::string>{"sh", "-c", s};
    }
    if (!v->is_array() || v->empty() || v->size() > 256)
        throw invalid_field(path(name), "expected a string or a non-empty array of strings");
    std::vector<std::string> argv;
    for (const auto& word : *v) {
        if (!word.is_string()) throw invalid_field(path(name), "expected an array of strings");
        argv.push_back(word.get<std::string>());
    }
    if (argv.front().empty()) throw invalid_field(path(name), "the program name is empty");
    return argv;
}

const json* RequestReader::raw(const std::string& name) {
    return find(name);
}

std::optional<RequestReader> RequestReader::object(const std::string& name) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    return RequestReader(*v, path(name));
}

void RequestReader::finish() const {
    for (const auto& [key, value] : body_.items())
        if (!read_.count(key)) throw invalid_field(path(key), "unknown field");
}

}  // namespace deskbox::server
