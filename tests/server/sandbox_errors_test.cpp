// sandbox/'s domain errors at the HTTP front door: every SandboxFault has its status in the one
// table (server/api/sandbox_errors.cpp), and ApiRouter answers a SandboxError with that status
// and the error's code, message and field, as it answers an ApiError.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api/api_router.hpp"
#include "server/api/sandbox_errors.hpp"
#include "tests/support/fake_sandbox_manager.hpp"

namespace deskbox::server {
namespace {

using nlohmann::json;

TEST(SandboxFaults, EveryFaultHasItsOwnStatus) {
    // kSandboxFaults lists each enum value once, in order: tables built on it miss none.
    for (std::size_t i = 0; i < kSandboxFaults.size(); ++i)
        EXPECT_EQ(static_cast<std::size_t>(kSandboxFaults[i]), i);
    EXPECT_EQ(static_cast<std::size_t>(SandboxFault::no_space) + 1, kSandboxFaults.size())
        << "a fault after no_space: add it to kSandboxFaults and to this test";
    // The statuses the API has always answered with, one per fault.
    const std::map<SandboxFault, unsigned> expected = {
        {SandboxFault::invalid, 400},       {SandboxFault::denied, 403},
        {SandboxFault::not_found, 404},     {SandboxFault::conflict, 409},
        {SandboxFault::too_large, 413},     {SandboxFault::unprocessable, 422},
        {SandboxFault::over_capacity, 429}, {SandboxFault::failed, 500},
        {SandboxFault::agent_failed, 502},  {SandboxFault::unavailable, 503},
        {SandboxFault::timed_out, 504},     {SandboxFault::no_space, 507}};
    EXPECT_EQ(expected.size(), kSandboxFaults.size());
    std::set<unsigned> statuses;
    for (SandboxFault fault : kSandboxFaults) {
        const unsigned status = http_status(fault);
        SCOPED_TRACE(static_cast<int>(fault));
        EXPECT_TRUE(statuses.insert(status).second) << status << " twice";
        ASSERT_TRUE(expected.count(fault));
        EXPECT_EQ(status, expected.at(fault));
    }
}

TEST(SandboxFaults, TheApiErrorKeepsCodeMessageAndField) {
    const ApiError e =
        to_api_error(SandboxError(SandboxFault::conflict, "sandbox_paused", "it is paused", "id"));
    EXPECT_EQ(e.status(), 409u);
    EXPECT_EQ(e.code(), "sandbox_paused");
    EXPECT_EQ(std::string(e.what()), "it is paused");
    EXPECT_EQ(e.field(), "id");

    const ApiError field = to_api_error(invalid_field("limits.cpus", "expected a number"));
    EXPECT_EQ(field.status(), 400u);
    EXPECT_EQ(field.code(), "bad_request");
    EXPECT_EQ(std::string(field.what()), "limits.cpus: expected a number");
    EXPECT_EQ(field.field(), "limits.cpus");
    EXPECT_EQ(std::string(invalid_field("", "expected an object").what()), "expected an object");
}

// SandboxErrors thrown where a request meets sandbox/ (admission's lookup, a route's body
// reader, the manager's limits, the agent client), as the client reads them.
class SandboxErrorsAtTheRouter : public ::testing::Test {
  protected:
    SandboxErrorsAtTheRouter()
        : manager_(test::make_fake_sandbox_manager(images_,
                                                   [](ManagerOptions& o) { o.max_sandboxes = 1; })),
          router_(*manager_, {}) {}

    HttpResponse call(http::verb method, const std::string& target, const std::string& body = {}) {
        HttpRequest request{method, target, 11};
        request.body() = body;
        request.prepare_payload();
        HttpExchange exchange{request, nullptr};
        return router_.handle(exchange);
    }
    // The status and the error object of `res`.
    static std::pair<unsigned, json> refusal(const HttpResponse& res) {
        return {res.result_int(), json::parse(res.body()).value("error", json::object())};
    }

    runtime::FakeTemplate images_;
    std::unique_ptr<SandboxManager> manager_;
    ApiRouter router_;
};

TEST_F(SandboxErrorsAtTheRouter, EachFaultIsItsStatusWithCodeMessageAndField) {
    // not_found, from the sandbox lookup in admission.
    auto [status, error] = refusal(call(http::verb::get, "/v1/sandboxes/sb-000000000000"));
    EXPECT_EQ(status, 404u);
    EXPECT_EQ(error, json({{"code", "not_found"},
                           {"message", "no sandbox 'sb-000000000000'"},
                           {"field", "id"}}));

    // invalid, from the create request's reader.
    std::tie(status, error) = refusal(call(http::verb::post, "/v1/sandboxes", R"({"dpi":"x"})"));
    EXPECT_EQ(status, 400u);
    EXPECT_EQ(
        error,
        json({{"code", "bad_request"}, {"message", "dpi: expected an integer"}, {"field", "dpi"}}));

    auto created = call(http::verb::post, "/v1/sandboxes", "{}");
    ASSERT_EQ(created.result_int(), 201u) << created.body();
    const std::string id = json::parse(created.body())["id"];

    // over_capacity, from the manager's limit (no field).
    std::tie(status, error) = refusal(call(http::verb::post, "/v1/sandboxes", "{}"));
    EXPECT_EQ(status, 429u);
    EXPECT_EQ(error["code"], "too_many_sandboxes");
    EXPECT_FALSE(error.contains("field")) << error;

    // agent_failed, from the agent client: the fake agent knows no clipboard.
    std::tie(status, error) = refusal(call(http::verb::get, "/v1/sandboxes/" + id + "/clipboard"));
    EXPECT_EQ(status, 502u);
    EXPECT_EQ(error["code"], "unknown_method");
    EXPECT_NE(error["message"].get<std::string>().find("clipboard"), std::string::npos) << error;
}

}  // namespace
}  // namespace deskbox::server
