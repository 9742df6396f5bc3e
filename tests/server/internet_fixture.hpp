// deskboxd with real runc containers of the `minimal` template and a test internet of the
// test's own (tests/support/test_internet.hpp), whose web and other hosts stand for the internet
// (the rest of 198.18.0.0/15 stays special). Needs root and the built template.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/server/deskboxd_fixture.hpp"
#include "tests/support/test_internet.hpp"

namespace deskbox::test {

class InternetSandboxes : public ::testing::Test {
  protected:
    // `names`: the test internet's DNS names (TestInternet's constructor).
    explicit InternetSandboxes(std::map<std::string, std::string> names)
        : names_(std::move(names)) {}
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root";
        if (!template_built())
            GTEST_SKIP() << "template 'minimal' not built: run images/build.py minimal";
        internet_ = std::make_unique<TestInternet>(names_);
    }
    // deskboxd resolving through the test internet.
    std::vector<std::string> server_flags(std::vector<std::string> extra = {}) const {
        std::vector<std::string> flags = {"--dns-upstream", internet_->dns_address(),
                                          "--public-range", internet_->web_address(),
                                          "--public-range", internet_->other_address()};
        flags.insert(flags.end(), extra.begin(), extra.end());
        return flags;
    }

    std::map<std::string, std::string> names_;
    std::unique_ptr<TestInternet> internet_;
};

inline std::string file_text(const std::filesystem::path& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace deskbox::test
