#include "server/api/routes/usage.hpp"

#include "server/api/http_util.hpp"
#include "server/usage/usage_query.hpp"
#include "server/usage/usage_sampler.hpp"

namespace deskbox::server::routes {

namespace {

usage::UsageService& usage_service(RouteContext& context) {
    if (!context.api.options.usage)
        throw ApiError(404, "not_found", "usage is not recorded on this server");
    return *context.api.options.usage;
}

}  // namespace

HttpResponse sandbox_metrics(RouteContext& context) {
    auto& service = usage_service(context);
    const std::string& id = context.params.at("id");
    auto history = service.ledger().history(id);
    if (!history)
        throw ApiError(404, "not_found",
                       "no samples of sandbox " + id +
                           " (unknown, not sampled yet, or ended longer ago than the server keeps "
                           "them)",
                       "id");
    const auto query =
        usage::parse_metrics_query(context.query, history->start.at, usage::now_millis());
    return json_response(200, usage::metrics_answer(*history, query));
}

HttpResponse usage_report(RouteContext& context) {
    auto& service = usage_service(context);
    const auto query = usage::parse_usage_query(context.query, usage::now_millis());
    const auto groups = usage::summarise(service.ledger().overlapping(query.from, query.to), query);
    const usage::Prices prices{service.options().price_vcpu_second,
                               service.options().price_gib_second};
    if (!query.csv) return json_response(200, usage::usage_json(groups, query, prices));
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, "text/csv; charset=utf-8");
    res.body() = usage::usage_csv(groups, prices);
    return res;
}

}  // namespace deskbox::server::routes
