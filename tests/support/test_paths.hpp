// Where this checkout and its build are, for tests and benchmarks: the source tree, the
// binaries they run, the API exchange record. Compiled once, into a generated test_paths.cpp
// (library deskbox_test_paths, tests/CMakeLists.txt), instead of into every test's compile line
// as definitions: a clone in another folder (CI) then shares the compiler cache for every test
// file, and only that one small file compiles again.
#pragma once

#include <string>

namespace deskbox::test_paths {

extern const char* const kSourceDir;  // the checkout
extern const char* const kDeskboxd;
extern const char* const kDeskboxCli;  // `deskbox`
extern const char* const kAgent;       // deskbox-agent
extern const char* const kRuntimeTestHelper;
// api_tests' exchanges, one JSON line each, for the OpenAPI conformance check.
extern const char* const kApiRecordFile;

// `relative` (e.g. "images/build.py") inside the checkout.
inline std::string source(const std::string& relative) {
    return std::string(kSourceDir) + "/" + relative;
}

}  // namespace deskbox::test_paths
