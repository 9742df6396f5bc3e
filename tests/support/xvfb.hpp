// Test fixture: a real Xvfb of its own per test, plus a client connection.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "guest-desktop/xvfb_server.hpp"

namespace deskbox::testing {

class XvfbTest : public ::testing::Test {
  protected:
    // Override to change the screen before SetUp starts the server.
    virtual desktop::XvfbOptions xvfb_options() const { return {}; }

    void SetUp() override {
        xvfb_ = std::make_unique<desktop::XvfbServer>(xvfb_options());
        display_ = xvfb_->connect();
    }
    void TearDown() override {
        display_.reset();
        xvfb_.reset();
    }

    Display* display() const { return display_.get(); }
    desktop::XvfbServer& xvfb() { return *xvfb_; }

  private:
    std::unique_ptr<desktop::XvfbServer> xvfb_;
    desktop::DisplayPtr display_;
};

}  // namespace deskbox::testing
