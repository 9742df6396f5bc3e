#include "server/api/routes/recordings.hpp"

#include <filesystem>
#include <fstream>

#include "server/api/http_util.hpp"
#include "server/sandbox/recording_request.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/sandbox/sandbox_media.hpp"

namespace deskbox::server::routes {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct RecordingFiles {
    std::string id;
    fs::path video, events;
};

// The files of the recording {id}: 404 for an id that cannot be one or has no video.
RecordingFiles recording_files(const RouteContext& context) {
    const std::string& id = context.params.at("id");
    try {
        runtime::validate_id(id);
    } catch (const runtime::SpecError&) {
        throw ApiError(404, "not_found", "no recording '" + id.substr(0, 64) + "'", "id");
    }
    const fs::path dir = context.api.manager.recordings_dir();
    RecordingFiles files{id, dir / (id + ".mp4"), dir / (id + ".events.jsonl")};
    if (!fs::exists(files.video))
        throw ApiError(404, "not_found", "no recording '" + id + "'", "id");
    return files;
}

HttpResponse download(const fs::path& file, const std::string& id, bool events) {
    std::ifstream in(file, std::ios::binary);
    if (!in)
        throw ApiError(404, "not_found",
                       "recording " + id + " has no " + (events ? "events track" : "video"));
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, events ? "application/x-ndjson" : "video/mp4");
    res.set(http::field::content_disposition,
            "attachment; filename=\"" + file.filename().string() + "\"");
    res.body().assign(std::istreambuf_iterator<char>(in), {});
    return res;
}

}  // namespace

HttpResponse recording_status(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200, context.media().recording_status());
}

HttpResponse start_recording(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(201, context.media().start_recording(
                                  read_recording_request(parse_body(context.request(), true))));
}

HttpResponse stop_recording(RouteContext& context) {
    allow_only(context.query, {});
    return json_response(200, context.media().stop_recording());
}

HttpResponse list_recordings(RouteContext& context) {
    const fs::path dir = context.api.manager.recordings_dir();
    json list = json::array();
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        std::string name = entry.path().filename().string();
        if (entry.path().extension() != ".mp4") continue;
        std::string id = name.substr(0, name.size() - 4);
        list.push_back({{"id", id},
                        {"bytes", entry.file_size(ec)},
                        {"events", fs::exists(dir / (id + ".events.jsonl"))}});
    }
    return json_response(200, {{"recordings", list}});
}

HttpResponse download_recording(RouteContext& context) {
    const RecordingFiles files = recording_files(context);
    return download(files.video, files.id, false);
}

HttpResponse download_recording_events(RouteContext& context) {
    const RecordingFiles files = recording_files(context);
    return download(files.events, files.id, true);
}

HttpResponse delete_recording(RouteContext& context) {
    const RecordingFiles files = recording_files(context);
    for (const auto& sandbox : context.api.manager.list())
        if (sandbox->describe(false).value("recording", "") == files.id)
            throw ApiError(409, "conflict", "recording " + files.id + " is running; stop it first");
    fs::remove(files.video);
    fs::remove(files.events);
    // As every DELETE of a named thing answers: {"deleted": its name}.
    return json_response(200, {{"deleted", files.id}});
}

}  // namespace deskbox::server::routes
