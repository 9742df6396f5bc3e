#include "server/api/routes/cluster_templates.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "server/api/http_util.hpp"
#include "server/http/http_server.hpp"
#include "server/sandbox/sandbox_manager.hpp"
#include "server/templates/template_ref.hpp"
#include "server/templates/template_transfer.hpp"

namespace deskbox::server::routes {

namespace {

constexpr int kStallMs = 60'000;  // a reader that takes nothing for this long is gone

// Blocking writes on the taken connection, each bounded by kStallMs.
void send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n > 0) {
            bytes.remove_prefix(static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pollfd pfd{fd, POLLOUT, 0};
            if (::poll(&pfd, 1, kStallMs) > 0) continue;
            throw std::runtime_error("the receiving node took nothing for 60 s");
        }
        throw std::runtime_error(std::string("sending: ") + std::strerror(errno));
    }
}

}  // namespace

HttpResponse serve_template_image(RouteContext& context) {
    allow_only(context.query, {"ref"});
    const std::string image_id = context.params.at("image_id");
    if (!templates::valid_image_id(image_id))
        throw ApiError(404, "not_found", "not an image id: 12 to 64 lowercase hex digits",
                       "image_id");
    templates::TemplateRef ref;
    try {
        ref = templates::parse_ref(required_query(context.query, "ref"));
    } catch (const std::invalid_argument& e) {
        throw bad_request("ref", e.what());
    }
    auto& store = context.api.manager.templates().store();
    const auto found = store.find(ref);
    if (!found || found->image_id != image_id ||
        !std::filesystem::is_directory(store.rootfs_of(image_id)))
        throw ApiError(404, "not_found",
                       "this node has no image " + image_id + " for template " + ref.str(),
                       "image_id");
    const auto rootfs = store.rootfs_of(image_id);
    if (!context.exchange.stream) {  // in-process callers (tests): the whole stream as the body
        HttpResponse res{http::status::ok, 11};
        res.set(http::field::content_type, "application/vnd.deskbox.image");
        templates::write_image_stream(*found, rootfs,
                                      [&](std::string_view bytes) { res.body().append(bytes); });
        res.prepare_payload();
        return res;
    }
    boost::beast::tcp_stream stream = std::move(*context.exchange.stream);
    context.exchange.taken = true;
    const int fd = stream.socket().native_handle();
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    try {
        send_all(fd,
                 "HTTP/1.1 200 OK\r\nServer: deskboxd\r\nContent-Type: "
                 "application/vnd.deskbox.image\r\nConnection: close\r\n\r\n");
        templates::write_image_stream(*found, rootfs,
                                      [fd](std::string_view bytes) { send_all(fd, bytes); });
    } catch (const std::exception& e) {
        // The receiver sees the stream end without its digest and refuses it.
        std::fprintf(stderr, "deskboxd: sending image %s (%s): %s\n", image_id.c_str(),
                     ref.str().c_str(), e.what());
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
    stream.socket().close(ignored);
    return {};
}

}  // namespace deskbox::server::routes
