// An Injector without X, for code that only dispatches actions: records every action it runs,
// keeps a pointer that goes where the actions point, answers cursor_position from it, and
// fails one chosen action on request.
#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <variant>
#include <vector>

#include "input/injector.hpp"

namespace deskbox::testing {

class FakeInjector final : public input::Injector {
  public:
    nlohmann::json execute(const input::Action& action) override {
        if (failing_ && failing_->index == calls_++) std::rethrow_exception(failing_->error);
        actions_.push_back(action);
        if (!std::holds_alternative<input::Zoom>(action))
            input::for_each_point(action,
                                  [this](const input::Point& p, std::size_t) { pointer_ = p; });
        if (std::holds_alternative<input::CursorPosition>(action))
            return {{"x", pointer_.x}, {"y", pointer_.y}};
        return nlohmann::json::object();
    }

    input::Point cursor_position() override { return pointer_; }

    // The `index`th call to execute (from 0) throws `error` instead of running its action.
    void fail_call(std::size_t index, std::exception_ptr error) {
        failing_ = Failure{index, std::move(error)};
    }

    // The actions run, in order (a failed one is not among them).
    const std::vector<input::Action>& actions() const { return actions_; }

  private:
    struct Failure {
        std::size_t index;
        std::exception_ptr error;
    };
    std::vector<input::Action> actions_;
    input::Point pointer_;
    std::size_t calls_ = 0;
    std::optional<Failure> failing_;
};

}  // namespace deskbox::testing
