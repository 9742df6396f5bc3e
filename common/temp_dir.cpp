#include "common/temp_dir.hpp"

#include <stdlib.h>

#include <cerrno>
#include <system_error>
#include <vector>

namespace deskbox {

TempDir::TempDir(const std::string& prefix) {
    auto base = std::filesystem::temp_directory_path() / (prefix + "-XXXXXX");
    std::string templ = base.string();
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path_ = buf.data();
}

TempDir::~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
}

}  // namespace deskbox
