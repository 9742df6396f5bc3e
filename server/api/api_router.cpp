#include "server/api/api_router.hpp"

#include "server/api/admission.hpp"
#include "server/api/sandbox_errors.hpp"
#include "server/cluster/cluster_service.hpp"

namespace deskbox::server {

namespace {

// A refusal as the request's client reads it: JSON-RPC for /mcp, the API's JSON error else.
HttpResponse refusal_answer(const Admission& admission, const ApiError& e) {
    if (admission.for_mcp()) return McpServer::error_answer(e);
    return json_error(e.status(), e.code(), e.what(), e.field());
}

// The operation a request is, for error rates by cause: "create", "command" or "".
std::string operation_of(const Admission& admission) {
    if (!admission.match || admission.context.request().method() != http::verb::post) return {};
    const std::string_view path = admission.match.route->path;
    if (path == "/v1/sandboxes") return "create";
    if (path == "/v1/sandboxes/{id}/commands") return "command";
    return {};
}

}  // namespace

ApiRouter::ApiRouter(SandboxManager& manager, ApiOptions options)
    : manager_(manager), options_(std::move(options)) {}

HttpResponse ApiRouter::handle(HttpExchange& exchange) {
    metrics_.count_request();
    Admission admission(services_, exchange, AdmissionPhase::request);
    try {
        return std::move(*admit(admission));
    } catch (const ApiError& e) {
        metrics_.count_error(e.code(), operation_of(admission));
        return refusal_answer(admission, e);
    } catch (const SandboxError& e) {
        metrics_.count_error(e.code(), operation_of(admission));
        return refusal_answer(admission, to_api_error(e));
    } catch (const std::exception& e) {
        metrics_.count_error("internal", operation_of(admission));
        return json_error(500, "internal", e.what());
    }
}

HeaderDecision ApiRouter::check_header(HttpRequest& header) {
    HttpExchange exchange{header, nullptr};
    Admission admission(services_, exchange, AdmissionPhase::header);
    HeaderDecision decision;
    try {
        decision.refusal = admit(admission);
    } catch (const ApiError& e) {
        metrics_.count_error(e.code());
        decision.refusal = refusal_answer(admission, e);
    } catch (const SandboxError& e) {
        metrics_.count_error(e.code());
        decision.refusal = refusal_answer(admission, to_api_error(e));
    }
    decision.body_limit = admission.body_limit;
    if (decision.refusal) metrics_.count_request();
    return decision;
}

}  // namespace deskbox::server
