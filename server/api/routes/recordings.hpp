// Recordings: a sandbox's running one (/v1/sandboxes/{id}/recording: status, start, stop), and
// the finished and running ones on disk (/v1/recordings): <id>.mp4 (fragmented, so a running
// one plays up to its last fragment) and <id>.events.jsonl. They outlive their sandboxes until
// deleted.
#pragma once

#include "server/api/route_context.hpp"

namespace deskbox::server::routes {

HttpResponse recording_status(RouteContext& context);  // GET /v1/sandboxes/{id}/recording
HttpResponse start_recording(RouteContext& context);   // POST, {"actions", "fps"}
HttpResponse stop_recording(RouteContext& context);    // DELETE

HttpResponse list_recordings(RouteContext& context);            // GET /v1/recordings
HttpResponse download_recording(RouteContext& context);         // GET|HEAD /v1/recordings/{id}
HttpResponse delete_recording(RouteContext& context);           // DELETE /v1/recordings/{id}
HttpResponse download_recording_events(RouteContext& context);  // GET|HEAD .../{id}/events

}  // namespace deskbox::server::routes
