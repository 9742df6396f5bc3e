// The HTTP messages deskboxd's handlers read and answer, without the server that carries them
// (http_server.hpp: sockets, streams, the parser and serializer). A handler, a route and a JSON
// helper need only these, and Beast's message headers cost a TU about half what http.hpp and
// tcp_stream.hpp do.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>

namespace deskbox::server {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

// The request a route handles and the connection it came on (http_server.hpp).
struct HttpExchange;

// A JSON error response in the API's one shape: {"error":{"code","message","field"?}}.
HttpResponse json_error(unsigned status, const std::string& code, const std::string& message,
                        const std::string& field = {}, unsigned version = 11);

}  // namespace deskbox::server
