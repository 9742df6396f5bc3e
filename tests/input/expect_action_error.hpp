// The input tests' check of a refusal: `call` throws an ActionError naming `field`, its reason
// holding `reason_part`.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "input/actions.hpp"

namespace deskbox::input {

inline void expect_error(const std::function<void()>& call, const std::string& field,
                         const std::string& reason_part) {
    try {
        call();
        ADD_FAILURE() << "no error; expected one for " << field;
    } catch (const ActionError& e) {
        EXPECT_EQ(e.field(), field) << e.what();
        EXPECT_NE(e.reason().find(reason_part), std::string::npos)
            << "reason: " << e.reason() << "\nexpected to contain: " << reason_part;
    }
}

}  // namespace deskbox::input
