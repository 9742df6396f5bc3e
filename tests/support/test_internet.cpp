#include "tests/support/test_internet.hpp"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/child_process.hpp"
#include "common/temp_dir.hpp"
#include "server/network/egress_ca.hpp"
#include "server/network/netns.hpp"
#include "server/network/rtnetlink.hpp"

namespace deskbox::test {
namespace {

namespace net = boost::asio;
namespace ssl = net::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// A self-signed P-256 certificate, for :8443: a server nobody trusts.
void use_self_signed(ssl::context& context) {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("deskbox test host"), -1, -1,
                               0);
    X509_set_issuer_name(cert, name);
    X509_sign(cert, key, EVP_sha256());
    SSL_CTX_use_certificate(context.native_handle(), cert);
    SSL_CTX_use_PrivateKey(context.native_handle(), key);
    X509_free(cert);
    EVP_PKEY_free(key);
}

}  // namespace

bool host_has_subnet(unsigned a, unsigned b, unsigned c) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return false;
    bool used = false;
    for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        auto address = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
        if ((address >> 8) == ((a << 16) | (b << 8) | c)) used = true;
    }
    ::freeifaddrs(list);
    return used;
}

struct TestInternet::Impl {
    int x = 0;
    network::NetworkNamespace ns;
    net::io_context io;
    ssl::context tls{ssl::context::tls_server};  // self-signed: :8443
    // The test's own CA and :443's certificates from it, one for each name a client asks for.
    TempDir ca_dir{"deskbox-test-ca"};
    std::shared_ptr<network::EgressCa> ca;
    ssl::context trusted_tls{ssl::context::tls_server};
    std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
    std::vector<std::thread> threads;
    ChildProcess dnsmasq;
    mutable std::mutex mutex;
    std::vector<std::string> seen;
    std::atomic<std::uint64_t> sink_bytes{0};
    std::atomic<std::uint64_t> held{0};
    std::vector<std::shared_ptr<tcp::socket>> holding;  // under `mutex`
    std::map<std::string, std::string> redirects;       // prefix -> base URL, under `mutex`
    std::unique_ptr<net::steady_timer> holder_retry;

    // SNI callback of :443: a certificate for the name asked for, from the test CA.
    static int serve_leaf_for_sni(SSL* ssl, int*, void* arg) {
        const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        if (!name) return SSL_TLSEXT_ERR_NOACK;  // the default certificate (web's address)
        try {
            std::string lower(name);
            for (char& c : lower)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            network::use_leaf_certificate(ssl, *static_cast<Impl*>(arg)->ca->leaf_for(lower));
        } catch (const std::exception&) {
            return SSL_TLSEXT_ERR_ALERT_FATAL;
        }
        return SSL_TLSEXT_ERR_OK;
    }
    void use_test_ca(const std::string& default_address) {
        ca = network::EgressCa::load_or_create(ca_dir.path());
        network::use_leaf_certificate(trusted_tls.native_handle(), *ca->leaf_for(default_address));
        SSL_CTX_set_tlsext_servername_callback(trusted_tls.native_handle(), serve_leaf_for_sni);
        SSL_CTX_set_tlsext_servername_arg(trusted_tls.native_handle(), this);
    }

    // The upstream proxies (:1080 SOCKS5, :3128 HTTP CONNECT): a thread per connection,
    // blocking, ended by shutting their sockets down.
    std::map<std::string, std::string> resolved;  // name -> address, as dnsmasq answers
    std::vector<std::thread> proxy_threads;       // under `mutex`
    std::set<int> proxy_fds;                      // open, under `mutex`
    bool stopping = false;                        // under `mutex`

    void accept_proxy(tcp::acceptor& acceptor, bool socks) {
        acceptor.async_accept([this, &acceptor, socks](beast::error_code ec, tcp::socket socket) {
            if (ec) return;
            std::lock_guard lock(mutex);
            if (stopping) return;
            socket.non_blocking(false);
            int fd = socket.release();
            proxy_fds.insert(fd);
            proxy_threads.emplace_back([this, fd, socks] {
                proxy_session(fd, socks);
                std::lock_guard lock(mutex);
                proxy_fds.erase(fd);
                ::close(fd);
            });
            accept_proxy(acceptor, socks);
        });
    }
    static bool read_exactly(int fd, void* into, std::size_t n) {
        auto* p = static_cast<char*>(into);
        while (n > 0) {
            ssize_t got = ::recv(fd, p, n, 0);
            if (got <= 0) return false;
            p += got;
            n -= static_cast<std::size_t>(got);
        }
        return true;
    }
    static void send_all(int fd, const std::string& bytes) {
        std::size_t sent = 0;
        while (sent < bytes.size()) {
            ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) return;
            sent += static_cast<std::size_t>(n);
        }
    }
    void proxy_session(int client, bool socks) {
        std::string target_name, auth = "none";
        std::uint16_t port = 0;
        std::string address;
        if (socks) {
            unsigned char b[262];
            if (!read_exactly(client, b, 2) || b[0] != 5 || !read_exactly(client, b + 2, b[1]))
                return;
            bool offers_password = std::find(b + 2, b + 2 + b[1], 2) != b + 2 + b[1];
            if (offers_password) {
                send_all(client, std::string("\x05\x02", 2));
                unsigned char len = 0;
                std::string user, password;
                if (!read_exactly(client, b, 2)) return;
                user.resize(b[1]);
                if (!read_exactly(client, user.data(), user.size()) ||
                    !read_exactly(client, &len, 1))
                    return;
                password.resize(len);
                if (!read_exactly(client, password.data(), password.size())) return;
                bool ok = user == "deskbox" && password == "proxy-pass";
                send_all(client, std::string(ok ? "\x01\x00" : "\x01\x01", 2));
                if (!ok) return;
                auth = "password";
            } else {
                send_all(client, std::string("\x05\x00", 2));
            }
            if (!read_exactly(client, b, 4) || b[1] != 1) return;
            if (b[3] == 1) {
                if (!read_exactly(client, b, 4)) return;
                address =
                    net::ip::make_address_v4(std::array<unsigned char, 4>{b[0], b[1], b[2], b[3]})
                        .to_string();
                target_name = address;
            } else if (b[3] == 3) {
                unsigned char len = 0;
                if (!read_exactly(client, &len, 1)) return;
                target_name.resize(len);
                if (!read_exactly(client, target_name.data(), len)) return;
            } else {
                return;
            }
            if (!read_exactly(client, b, 2)) return;
            port = static_cast<std::uint16_t>(b[0] << 8 | b[1]);
        } else {
            std::string head;
            char c;
            while (!head.ends_with("\r\n\r\n") && head.size() < 8192 && read_exactly(client, &c, 1))
                head += c;
            // CONNECT host:port HTTP/1.1
            auto sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
            if (head.rfind("CONNECT ", 0) != 0 || sp2 == std::string::npos) return;
            std::string authority = head.substr(sp1 + 1, sp2 - sp1 - 1);
            auto colon = authority.rfind(':');
            target_name = authority.substr(0, colon);
            port = static_cast<std::uint16_t>(std::stoi(authority.substr(colon + 1)));
            if (head.find("Proxy-Authorization: Basic ZGVza2JveDpwcm94eS1wYXNz") !=
                std::string::npos)
                auth = "password";
        }
        if (address.empty()) {
            auto it = resolved.find(target_name);
            address = it != resolved.end() ? it->second : target_name;
        }
        note("proxy=" + std::string(socks ? "socks5" : "http") + " target=" + target_name + ":" +
             std::to_string(port) + " auth=" + auth);
        UniqueFd upstream = ns.socket(AF_INET, SOCK_STREAM);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        boost::system::error_code bad;
        auto v4 = net::ip::make_address_v4(address, bad);
        a.sin_addr.s_addr = htonl(bad ? 0 : v4.to_uint());
        if (bad || ::connect(upstream.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            send_all(client, socks ? std::string("\x05\x05\x00\x01\0\0\0\0\0\0", 10)
                                   : "HTTP/1.1 502 Bad Gateway\r\n\r\n");
            return;
        }
        send_all(client, socks ? std::string("\x05\x00\x00\x01\0\0\0\0\0\0", 10)
                               : "HTTP/1.1 200 Connection established\r\n\r\n");
        {
            std::lock_guard lock(mutex);
            if (stopping) return;
            proxy_fds.insert(upstream.get());
        }
        // Both ways until both have ended.
        pollfd fds[2] = {{client, POLLIN, 0}, {upstream.get(), POLLIN, 0}};
        bool open[2] = {true, true};
        char buffer[65536];
        while (open[0] || open[1]) {
            if (::poll(fds, 2, -1) < 0) break;
            for (int i = 0; i < 2; ++i) {
                if (!open[i] || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                ssize_t n = ::recv(fds[i].fd, buffer, sizeof buffer, 0);
                if (n <= 0) {
                    open[i] = false;
                    fds[i].events = 0;
                    ::shutdown(fds[1 - i].fd, SHUT_WR);
                    continue;
                }
                send_all(fds[1 - i].fd, std::string(buffer, static_cast<std::size_t>(n)));
            }
        }
        std::lock_guard lock(mutex);
        proxy_fds.erase(upstream.get());
    }

    ~Impl() {
        {
            std::lock_guard lock(mutex);
            stopping = true;
            for (int fd : proxy_fds) ::shutdown(fd, SHUT_RDWR);
        }
        dnsmasq.terminate(std::chrono::milliseconds(500));
        io.stop();
        for (auto& t : threads) t.join();
        for (auto& t : proxy_threads) t.join();  // io is stopped: no more of them start
    }

    std::string address(int host) const {
        return "198.18." + std::to_string(x) + "." + std::to_string(host);
    }

    tcp::acceptor& listen(const std::string& addr, unsigned short port) {
        UniqueFd fd = ns.socket(AF_INET, SOCK_STREAM);
        int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(net::ip::make_address_v4(addr).to_uint());
        if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(fd.get(), 128) != 0)
            throw std::runtime_error("test internet: cannot listen on " + addr + ":" +
                                     std::to_string(port) + ": " + std::strerror(errno));
        auto acceptor = std::make_unique<tcp::acceptor>(io);
        acceptor->assign(tcp::v4(), fd.release());
        acceptors.push_back(std::move(acceptor));
        return *acceptors.back();
    }

    void note(const std::string& line) {
        std::lock_guard lock(mutex);
        seen.push_back(line);
    }

    std::optional<std::string> redirect_for(const std::string& target) const {
        std::lock_guard lock(mutex);
        for (const auto& [prefix, base] : redirects)
            if (target.rfind(prefix, 0) == 0) return base;
        return std::nullopt;
    }

    http::response<http::string_body> answer(const http::request<http::string_body>& req,
                                             const std::string& local, const std::string& sni) {
        std::string host(req[http::field::host]);
        std::string target(req.target());
        std::string fields;
        if (target.rfind("/headers", 0) == 0)
            for (const auto& field : req)
                fields +=
                    " | " + std::string(field.name_string()) + ": " + std::string(field.value());
        note("host=" + host + " sni=" + sni + " address=" + local + " target=" + target + fields);
        http::response<http::string_body> res{http::status::ok, req.version()};
        res.set(http::field::content_type, "text/plain");
        if (auto to = redirect_for(target)) {
            res.result(http::status::temporary_redirect);
            res.set(http::field::location, *to + target);
        } else if (target == "/page") {
            res.set(http::field::content_type, "text/html; charset=utf-8");
            res.body() = "<!doctype html><title>deskbox test page at " + local +
                         "</title><h1>Hello from the test internet</h1>\n";
        } else if (target.rfind("/headers", 0) == 0) {
            // Echoes the request's header fields, one "name: value" a line.
            for (const auto& field : req)
                res.body() +=
                    std::string(field.name_string()) + ": " + std::string(field.value()) + "\n";
        } else if (target.rfind("/bytes/", 0) == 0) {
            std::size_t n = std::min<std::size_t>(std::stoull(target.substr(7)), 64u << 20);
            res.body().assign(n, 'x');
        } else {
            res.body() = "deskbox test host " + local + " host=" + host + " sni=" + sni + "\n";
        }
        res.keep_alive(req.keep_alive());
        res.prepare_payload();
        return res;
    }

    template <class Stream>
    void serve(std::shared_ptr<Stream> stream, std::string local, std::string sni) {
        auto buffer = std::make_shared<beast::flat_buffer>();
        auto req = std::make_shared<http::request<http::string_body>>();
        http::async_read(
            *stream, *buffer, *req,
            [this, stream, buffer, req, local, sni](beast::error_code ec, std::size_t) {
                if (ec) return;
                auto res =
                    std::make_shared<http::response<http::string_body>>(answer(*req, local, sni));
                http::async_write(
                    *stream, *res,
                    [this, stream, res, local, sni](beast::error_code ec, std::size_t) {
                        if (ec || !res->keep_alive()) return;
                        serve(stream, local, sni);
                    });
            });
    }

    void accept_http(tcp::acceptor& acceptor, const std::string& local) {
        acceptor.async_accept([this, &acceptor, local](beast::error_code ec, tcp::socket socket) {
            if (ec) return;
            serve(std::make_shared<tcp::socket>(std::move(socket)), local, "-");
            accept_http(acceptor, local);
        });
    }

    void accept_https(tcp::acceptor& acceptor, const std::string& local, ssl::context& context) {
        acceptor.async_accept([this, &acceptor, local, &context](beast::error_code ec,
                                                                 tcp::socket socket) {
            if (ec) return;
            // A TLS server writes in pieces (session tickets, then records): without this its
            // Nagle holds a piece for the client's delayed ACK, 40 ms a connection.
            socket.set_option(tcp::no_delay(true), ec);
            auto stream = std::make_shared<ssl::stream<tcp::socket>>(std::move(socket), context);
            stream->async_handshake(
                ssl::stream_base::server, [this, stream, local](beast::error_code ec) {
                    if (ec) return;
                    const char* name =
                        SSL_get_servername(stream->native_handle(), TLSEXT_NAMETYPE_host_name);
                    serve(stream, local, name ? name : "(none)");
                });
            accept_https(acceptor, local, context);
        });
    }

    // The source waits for a request head (so a proxy deciding by Host can see one), then
    // sends until the peer goes.
    void accept_source(tcp::acceptor& acceptor) {
        acceptor.async_accept([this, &acceptor](beast::error_code ec, tcp::socket socket) {
            if (ec) return;
            auto s = std::make_shared<tcp::socket>(std::move(socket));
            auto head = std::make_shared<std::string>();
            net::async_read_until(*s, net::dynamic_buffer(*head), "\r\n\r\n",
                                  [this, s, head](beast::error_code ec, std::size_t) {
                                      if (ec) return;
                                      pour(s, std::make_shared<std::string>(1 << 20, 'z'));
                                  });
            accept_source(acceptor);
        });
    }
    void pour(std::shared_ptr<tcp::socket> s, std::shared_ptr<std::string> chunk) {
        net::async_write(*s, net::buffer(*chunk),
                         [this, s, chunk](beast::error_code ec, std::size_t) {
                             if (!ec) pour(s, chunk);
                         });
    }

    std::unique_ptr<net::ip::udp::socket> echo;
    std::array<char, 65536> echo_buffer{};
    net::ip::udp::endpoint echo_peer;
    void start_udp_echo(const std::string& addr, unsigned short port) {
        UniqueFd fd = ns.socket(AF_INET, SOCK_DGRAM);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(net::ip::make_address_v4(addr).to_uint());
        if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
            throw std::runtime_error("test internet: cannot bind UDP " + addr);
        echo = std::make_unique<net::ip::udp::socket>(io);
        echo->assign(net::ip::udp::v4(), fd.release());
        echo_once();
    }
    void echo_once() {
        echo->async_receive_from(
            net::buffer(echo_buffer), echo_peer, [this](beast::error_code ec, std::size_t n) {
                if (ec) return;
                note("udp from=" + echo_peer.address().to_string());
                boost::system::error_code ignored;
                echo->send_to(net::buffer(echo_buffer.data(), n), echo_peer, 0, ignored);
                echo_once();
            });
    }

    void accept_sink(tcp::acceptor& acceptor) {
        acceptor.async_accept([this, &acceptor](beast::error_code ec, tcp::socket socket) {
            if (ec) return;
            auto s = std::make_shared<tcp::socket>(std::move(socket));
            auto buffer = std::make_shared<std::vector<char>>(1 << 20);
            drink(s, buffer);
            accept_sink(acceptor);
        });
    }
    // Accepts and keeps every connection, reading nothing (a host that many connections reach
    // at little cost); out of fds it tries again a little later.
    void accept_holder(tcp::acceptor& acceptor) {
        acceptor.async_accept([this, &acceptor](beast::error_code ec, tcp::socket socket) {
            if (ec == net::error::operation_aborted) return;
            if (ec) {
                if (!holder_retry) holder_retry = std::make_unique<net::steady_timer>(io);
                holder_retry->expires_after(std::chrono::milliseconds(20));
                holder_retry->async_wait([this, &acceptor](beast::error_code wait_ec) {
                    if (!wait_ec) accept_holder(acceptor);
                });
                return;
            }
            {
                std::lock_guard lock(mutex);
                holding.push_back(std::make_shared<tcp::socket>(std::move(socket)));
            }
            ++held;
            accept_holder(acceptor);
        });
    }
    void drink(std::shared_ptr<tcp::socket> s, std::shared_ptr<std::vector<char>> buffer) {
        s->async_read_some(net::buffer(*buffer),
                           [this, s, buffer](beast::error_code ec, std::size_t n) {
                               sink_bytes += n;
                               if (!ec) drink(s, buffer);
                           });
    }
};

TestInternet::TestInternet(std::map<std::string, std::string> names)
    : impl_(std::make_unique<Impl>()) {
    std::mt19937 random{std::random_device{}()};
    for (int attempt = 0; attempt < 64 && impl_->x == 0; ++attempt) {
        int x = 1 + static_cast<int>(random() % 254);
        if (!host_has_subnet(198, 18, static_cast<unsigned>(x))) impl_->x = x;
    }
    if (impl_->x == 0) throw std::runtime_error("test internet: no free 198.18.X.0/24");
    const std::string link = "dbxinet" + std::to_string(impl_->x);
    impl_->ns = network::NetworkNamespace::create();
    {
        network::RtNetlink host;  // this thread is in the host's namespace
        host.add_veth(link, "eth0", impl_->ns.fd());
        host.add_address(link, host_side_address(), 24);
        host.set_up(link);
    }
    impl_->ns.run([&] {
        network::RtNetlink nl;
        nl.set_up("lo");
        nl.add_address("eth0", web_address(), 24);
        nl.add_address("eth0", other_address(), 24);
        nl.add_address("eth0", lan_address(), 24);
        nl.set_up("eth0");
        // Answers to clients beyond the veth's subnet (a benchmark's own namespaces) go back
        // through the host.
        nl.add_route("0.0.0.0", 0, host_side_address(), "eth0");
    });
    use_self_signed(impl_->tls);
    impl_->use_test_ca(web_address());
    for (const std::string& local : {web_address(), other_address(), lan_address()}) {
        impl_->accept_http(impl_->listen(local, 80), local);
        impl_->accept_https(impl_->listen(local, 443), local, impl_->trusted_tls);
        impl_->accept_https(impl_->listen(local, 8443), local, impl_->tls);
    }
    impl_->accept_source(impl_->listen(web_address(), 9000));
    impl_->accept_sink(impl_->listen(web_address(), 9001));
    impl_->accept_holder(impl_->listen(web_address(), 9002));
    impl_->start_udp_echo(web_address(), 7);
    impl_->accept_proxy(impl_->listen(web_address(), 1080), true);
    impl_->accept_proxy(impl_->listen(web_address(), 3128), false);
    for (auto [name, address] : names)
        impl_->resolved[name] = address == "web"     ? web_address()
                                : address == "other" ? other_address()
                                : address == "lan"   ? lan_address()
                                                     : address;
    for (int i = 0; i < 2; ++i) impl_->threads.emplace_back([this] { impl_->io.run(); });

    SpawnOptions dns;
    dns.argv = {"dnsmasq",
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
                "--conf-file=/dev/null",
                "--pid-file=",
                "--bind-interfaces",
                "--listen-address=" + dns_address(),
                "--port=53",
                "--log-facility=-"};
    for (auto [name, address] : names) {
        if (address == "web") address = web_address();
        if (address == "other") address = other_address();
        if (address == "lan") address = lan_address();
        dns.argv.push_back("--host-record=" + name + "," + address);
    }
    dns.netns_fd = impl_->ns.fd();
    dns.stdout_to_null = true;
    dns.stderr_to_null = true;
    impl_->dnsmasq = ChildProcess::spawn(dns);
    // Ready once it takes TCP connections on port 53.
    for (int i = 0; i < 200; ++i) {
        net::io_context probe_io;
        tcp::socket probe(probe_io);
        boost::system::error_code ec;
        probe.connect({net::ip::make_address(dns_address()), 53}, ec);
        if (!ec) return;
        if (!impl_->dnsmasq.running()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    throw std::runtime_error("test internet: dnsmasq did not start (is dnsmasq-base installed?)");
}

TestInternet::~TestInternet() = default;

std::string TestInternet::ca_file() const {
    return impl_->ca->certificate_path().string();
}

std::string TestInternet::host_side_address() const {
    return impl_->address(1);
}
std::string TestInternet::web_address() const {
    return impl_->address(2);
}
std::string TestInternet::other_address() const {
    return impl_->address(3);
}
std::string TestInternet::lan_address() const {
    return impl_->address(4);
}
std::string TestInternet::subnet() const {
    return impl_->address(0) + "/24";
}

std::vector<std::string> TestInternet::requests_seen() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->seen;
}

std::uint64_t TestInternet::sink_bytes() const {
    return impl_->sink_bytes;
}
std::uint64_t TestInternet::held_connections() const {
    return impl_->held;
}
void TestInternet::release_held() {
    std::lock_guard lock(impl_->mutex);
    impl_->holding.clear();
}
void TestInternet::redirect(const std::string& prefix, const std::string& to_base) {
    std::lock_guard lock(impl_->mutex);
    impl_->redirects[prefix] = to_base;
}

std::string TestInternet::host_side_link() const {
    return "dbxinet" + std::to_string(impl_->x);
}

}  // namespace deskbox::test
