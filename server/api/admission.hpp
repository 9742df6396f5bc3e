// A request's way in to deskboxd, in one place. The stages run in the order of kAdmission;
// each is a function of the request's Admission that passes it on (returns nullopt) or
// answers: it returns the answer, or throws ApiError (or sandbox/'s SandboxError, from the
// sandbox it looks up), which ApiRouter turns into the JSON error
// (a JSON-RPC one for /mcp). HttpServer has ApiRouter run the header stages on the header alone,
// before the body is read, so a refused request's body is never read; with the body, every
// stage runs again from the first, down to the handler.
//
//  stage                  what passes                                                  answers
//  1  target              the target's bytes decode: path, query, ?key=; the route     400
//                         table's match (no refusal yet: UTF-8 comes first)
//  2  host                a keyless server answers only to its own names (DNS          421
//                         rebinding)
//  3  port host           Host {port}-{id}.<ports domain> names an exposed port,       404 400
//                         whatever the path: such a request skips 4-6 (the program
//                         gets it as sent) and is relayed at 11
//  4  utf-8               path, query and header values are UTF-8 (not for a path-     400
//                         form port: as sent)
//  5  route               the path has a route and the method a handler; sets the      404 405
//                         route's body limit and path variables
//  6  origin              a cross-site request may not change state nor use /mcp       403
//  7  credentials here    what this node can check: everything on a single node; in a  401 404
//                         cluster, for a sandbox's route or port only an API key (its
//                         tokens are known to the node that owns it)
//  8  body size           the route's body limit (HttpServer holds the wire to it;     413
//                         this is for in-process callers)
//  9  owner node          in a cluster, a sandbox another node owns: the request is    503 or
//                         forwarded or the connection relayed to it                    the owner's
//  10 credentials there   in a cluster, the owner's part of 7: the sandbox's tokens    401 404
//  11 handler             the route's handler, or the port's relay                     its own
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "server/api/api_routes.hpp"
#include "server/api/route_context.hpp"
#include "server/api/routes/ports.hpp"
#include "server/cluster/owner_routing.hpp"

namespace deskbox::server {

enum class AdmissionPhase {
    header,   // the header alone, before the body is read: the stages marked on_header
    request,  // the whole request: every stage, down to the handler's answer
};

// One request on its way in: its context and what the stages decided so far.
struct Admission {
    Admission(ApiServices& services, HttpExchange& exchange, AdmissionPhase phase);

    RouteContext context;
    AdmissionPhase phase;
    // The cluster's answer to "who owns this sandbox" (ApiOptions::cluster), or null: a single
    // node.
    OwnerRouting* owners = nullptr;
    RouteMatch match{};                        // 1: the route the path falls under, if any
    std::optional<routes::PortTarget> port{};  // 3: the exposed port the Host names, if any
    std::size_t body_limit = 0;                // 3, 5: this request's (max_json_body at first)

    // In a cluster, a request about a sandbox another node may own (a sandbox's route or a
    // port host): its owner checks the sandbox's tokens, at stage 10.
    bool owner_decides() const;
    // For /mcp, whose clients read JSON-RPC errors, also for refusals before it runs.
    bool for_mcp() const;
};

// A stage's verdict: nullopt passes the request on; an answer ends its way in.
using AdmissionAnswer = std::optional<HttpResponse>;

namespace admission {

AdmissionAnswer decode_target(Admission& a);            // 1
AdmissionAnswer check_host_name(Admission& a);          // 2
AdmissionAnswer find_port_host(Admission& a);           // 3
AdmissionAnswer check_utf8(Admission& a);               // 4
AdmissionAnswer match_route(Admission& a);              // 5
AdmissionAnswer check_cross_site(Admission& a);         // 6
AdmissionAnswer check_credentials_here(Admission& a);   // 7
AdmissionAnswer check_body_size(Admission& a);          // 8
AdmissionAnswer route_to_owner(Admission& a);           // 9
AdmissionAnswer check_credentials_there(Admission& a);  // 10
AdmissionAnswer run_handler(Admission& a);              // 11

}  // namespace admission

struct AdmissionStage {
    std::string_view name;
    bool on_header;  // runs on the header alone too (AdmissionPhase::header)
    AdmissionAnswer (*run)(Admission& a);
};

inline constexpr std::array<AdmissionStage, 11> kAdmission = {{
    {"target", true, admission::decode_target},
    {"host", true, admission::check_host_name},
    {"port host", true, admission::find_port_host},
    {"utf-8", true, admission::check_utf8},
    {"route", true, admission::match_route},
    {"origin", true, admission::check_cross_site},
    {"credentials here", true, admission::check_credentials_here},
    {"body size", false, admission::check_body_size},
    {"owner node", false, admission::route_to_owner},
    {"credentials there", false, admission::check_credentials_there},
    {"handler", false, admission::run_handler},
}};

// Runs the stages of a.phase in order until one answers, and returns that answer: in the
// request phase always one (the handler's, at the latest); in the header phase nullopt when the
// header passed them all. Refusals are thrown as ApiError or SandboxError.
AdmissionAnswer admit(Admission& a);

}  // namespace deskbox::server
