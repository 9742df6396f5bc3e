// A temporary directory removed with its contents on destruction.
#pragma once

#include <filesystem>
#include <string>

namespace deskbox {

class TempDir {
  public:
    explicit TempDir(const std::string& prefix = "deskbox");
    ~TempDir();
    TempDir(TempDir&& other) noexcept;
    TempDir& operator=(TempDir&&) = delete;
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

}  // namespace deskbox
