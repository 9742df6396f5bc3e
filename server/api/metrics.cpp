#include "server/api/metrics.hpp"

#include <sstream>

namespace deskbox::server {

void Histogram::observe(double seconds) {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < kBuckets.size(); ++i)
        if (seconds <= kBuckets[i]) ++counts_[i];
    ++total_;
    sum_ += seconds;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
    std::lock_guard lock(mutex_);
    std::ostringstream out;
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
    for (std::size_t i = 0; i < kBuckets.size(); ++i)
        out << name << "_bucket{le=\"" << kBuckets[i] << "\"} " << counts_[i] << '\n';
    out << name << "_bucket{le=\"+Inf\"} " << total_ << '\n';
    out << name << "_sum " << sum_ << '\n' << name << "_count " << total_ << '\n';
    return out.str();
}

void Metrics::count_error(const std::string& code, const std::string& operation) {
    std::lock_guard lock(mutex_);
    ++errors_[code];
    if (!operation.empty()) ++operation_errors_[{operation, code}];
}

void Metrics::count_operation_error(const std::string& operation, const std::string& cause) {
    std::lock_guard lock(mutex_);
    ++operation_errors_[{operation, cause}];
}

void Metrics::count_request() {
    std::lock_guard lock(mutex_);
    ++requests_;
}

std::string Metrics::render_counters() const {
    std::lock_guard lock(mutex_);
    std::ostringstream out;
    out << "# HELP deskbox_http_requests_total HTTP requests served.\n"
           "# TYPE deskbox_http_requests_total counter\n"
        << "deskbox_http_requests_total " << requests_ << '\n';
    out << "# HELP deskbox_errors_total Error answers by code.\n"
           "# TYPE deskbox_errors_total counter\n";
    for (auto& [code, n] : errors_)
        out << "deskbox_errors_total{code=\"" << code << "\"} " << n << '\n';
    out << "# HELP deskbox_operation_errors_total Failed creates and commands by cause: the "
           "error code, or timed_out / exit_nonzero for a command that ran.\n"
           "# TYPE deskbox_operation_errors_total counter\n";
    for (auto& [key, n] : operation_errors_)
        out << "deskbox_operation_errors_total{operation=\"" << key.first << "\",cause=\""
            << key.second << "\"} " << n << '\n';
    return out.str();
}

}  // namespace deskbox::server
