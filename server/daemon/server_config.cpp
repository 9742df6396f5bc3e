#include "server/daemon/server_config.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "common/parse_integer.hpp"
#include "common/pem.hpp"
#include "server/api/request_guard.hpp"
#include "server/cluster/cluster_records.hpp"
#include "server/runtime/container/runtime.hpp"
#include "server/runtime/container/user_namespace.hpp"
#include "server/runtime/microvm/runtime.hpp"
#include "server/templates/registry.hpp"

namespace deskbox::server {

const char* const kServerUsage = R"(usage: deskboxd [options]
  --listen ADDR:PORT      (default 127.0.0.1:8700; port 0 picks a free one)
  --api-key KEY           required to listen beyond loopback (repeatable; env DESKBOX_API_KEYS=a,b)
  --config FILE           JSON file with any of these options (keys without the dashes)
  --state-dir DIR         sandboxes, audit logs (default /var/lib/deskbox)
  --cache-dir DIR         built templates (default /var/cache/deskbox)
  --images-dir DIR        template definitions (default: the source tree's images/)
  --agent PATH            deskbox-agent binary to run in sandboxes (default: the build's)
  --egress-ca-cert FILE   PEM certificate(s) every sandbox trusts from its first process on,
                          besides deskboxd's own egress CA (always trusted): in the system
                          bundle, Firefox's policy, NODE_EXTRA_CA_CERTS and the like
  --default-runtime NAME  a runtime this server has: container (default) or microvm
  --default-template NAME minimal (default)
  --max-sandboxes N       (default 20)
  --default-timeout S     (default 300)
  --default-disk-mb N     what a container sandbox may write, unless its create says
                          limits.disk_mb (default 8192; 0: no cap, writes go to the host disk)
  --disk-overcommit R     refuse a create (507) when the disk caps of this server's sandboxes
                          with the new one pass R x the state dir's free space (default 2; 0: off)
  --max-timeout S         (default 86400)
  --mount-guest-written-volumes B  true: a volume a microVM wrote (its kernel had the raw
                          image) may be mounted on the host again, for containers and the files
                          API, once e2fsck passes; false (default): it stays a microVM volume
  --microvm-pool T=N      keep N microVM sandboxes of template T restored and ready (repeatable)
  --container-pool T=N    keep N container sandboxes of template T started to a ready desktop
                          (repeatable; T may be a template users built, name:tag)
  --default-network V     network of a create that does not say: true (the internet, default)
                          or false (loopback only); requests may also give {"allow","deny"}
  --dns-upstream A[:P]    DNS server sandbox lookups go to (default: /etc/resolv.conf's first)
  --public-range CIDR     treat this special range as the internet (a lab or test network;
                          repeatable)
  --egress-proxy [NAME=]URL  send sandboxes' allowed TCP egress through this proxy:
                          socks5://[USER:PASS@]ADDR:PORT or http://[USER:PASS@]ADDR:PORT (CONNECT);
                          names go to the proxy to resolve; UDP other than DNS is then refused.
                          Without NAME: every sandbox's; with it (repeatable): a sandbox's
                          network {"proxy": NAME} picks it
  --egress-trust-ca FILE  a PEM CA that servers reached through HTTPS credential rules may
                          chain to, beside the host's trust store (repeatable)
  --ports-domain DOMAIN    also serve exposed ports at {port}-{id}.DOMAIN (wildcard DNS to here)
  --threads N             HTTP I/O threads: sockets, streams, VNC (default 2)
  --max-handlers N        requests handled at once, each on its own thread so a long
                          command never holds up a stream (default 256; more queue)
  --max-header-kb N       request header limit (default 16; past it 431)
  --max-body-mb N         request body limit of uploads: files, commands' stdin, images,
                          exposed ports (default 64); other routes take 1 MiB of JSON
  --max-body-in-flight-mb N  request body bytes being received at once over all connections;
                          past it 503 server_busy before the body is read (default 256)
  --max-http-connections N  open HTTP connections (default 1024); past it the oldest idle one
                          is closed, or the new one refused when none is idle
  --max-idle-http-connections N  connections waiting for a request (not yet authenticated or
                          idle; default 256); past it the oldest of them is closed
  --egress-max-connections N  TCP connections (6 fds each) and UDP flows each sandbox may hold
                          open through deskboxd (default: from the fd budget, RLIMIT_NOFILE
                          shared by --max-sandboxes, at most 1024); past it a new one is reset
  --egress-half-closed-idle-s N  once one side of a relayed TCP connection has closed, how
                          long the other may stay silent before both are reset (default 60)
  --egress-first-bytes-ms N  when a policy decides by name, how long the proxy waits for a
                          connection's first bytes (TLS hello, HTTP request) before deciding
                          by address alone (default 2000; longer delays server-first protocols)
  --allowed-host NAME     without an API key only localhost, 127.0.0.1 and [::1] are answered
                          (a foreign Host is a DNS-rebinding page: 421); also answer NAME
                          (repeatable; --ports-domain's names are always answered)
  --allowed-origin ORIGIN a web origin (https://app.example.com) besides the server's own
                          that may send POST/PUT/PATCH/DELETE and use /mcp (repeatable)
  --userns-range FIRST:N  container sandboxes run in user namespaces; each gets one of N
                          ranges of 65536 host ids from FIRST, which no account, group or
                          /etc/subuid range may use (default 1073741824:4096); the last
                          range is the template build engine's (RUN steps' root)
  --userns true|false     false: guest ids are host ids (weaker; for kernels without
                          idmapped mounts; default true); template builds are then refused
  --template-registry H[:P]  a registry Dockerfiles' FROM and imports by reference may pull
                          from, over HTTPS with a verified certificate, anonymously (repeatable;
                          default none: builds use only images that are here)
  --template-registry-insecure H[:P]  the same over plain HTTP or unverified HTTPS (a test or
                          lab registry; repeatable)
  --template-pull-timeout-s N  how long one pull may take (default 600)
  --template-pull-max-mb N  the largest image a pull fetches, its layers compressed as the
                          registry's manifest declares them (default 8192)
  --template-pull-keep-h N  how long a pulled image no template stands on is kept as a cache
                          (default 24; 0: removed once unused)
  --template-disk-gb N    the build engine's own disk: every build's layers, cache and pulled
                          bases, so no build fills the host's (default: half the state
                          folder's filesystem, at most 32; a larger N grows it at start)
  --cluster etcd=URL,...  join a cluster coordinated by etcd (docs/CLUSTER.md); then also:
  --node-name N           this node's name (default: the host name)
  --advertise URL         where the other nodes reach this API (default: http://LISTEN)
  --cluster-secret S      shared by every node, 16+ characters (or --cluster-secret-file F,
                          or env DESKBOX_CLUSTER_SECRET)
  --cluster-lease-s N     how long a silent node stays a member (default 10)
  --cluster-prefix P      etcd key prefix (default /deskbox/)
  --usage-sample-s N      how often every sandbox's CPU, memory, disk and network are sampled
                          into the usage ledger (<state-dir>/usage; default 5; 0: off)
  --metrics-keep-h N      how long a sandbox's samples are kept after it ends (default 24);
                          its start, end and daily totals stay for usage reports
  --price-vcpu-second P   the cost of a reserved vCPU per second running: adds a cost column
                          to usage reports (default 0: none)
  --price-gib-second P    the cost of a reserved GiB of memory per second running
  --events-keep-days N    how long lifecycle events stay in <state-dir>/events (default 30);
                          an event a webhook has not had yet stays until it has
  --events-max-undelivered N
                          a webhook more than N events behind (down for long) loses the
                          oldest: said on stderr, counted in deskbox_webhook_dropped_total
                          (default 100000)
  --on-exit keep|kill     what SIGTERM does with running sandboxes (containers, microVMs): keep
                          them for the next deskboxd on this state dir to adopt (default), or kill
                          them; SIGINT (^C) always kills them
)";

bool is_loopback(const std::string& address) {
    return address == "127.0.0.1" || address == "::1" || address == "localhost" ||
           address.rfind("127.", 0) == 0;
}

std::string default_advertise(const std::string& address, unsigned short port) {
    if (address == "0.0.0.0" || address == "::" || address.empty())
        throw std::invalid_argument("--advertise: listening on " +
                                    (address.empty() ? std::string("every address") : address) +
                                    ", say where the other nodes reach this one (--advertise URL)");
    const bool v6 = address.find(':') != std::string::npos;
    return "http://" + (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

namespace {

std::string trimmed_file(const std::string& path, const std::string& option) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("--" + option + ": cannot read " + path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    return text;
}

// The --cluster options; false if `key` is none of them.
bool apply_cluster(ServerConfig& c, const std::string& key, const std::string& value) {
    auto is = [&](const char* dashed) {
        std::string underscored = dashed;
        std::replace(underscored.begin(), underscored.end(), '-', '_');
        return key == dashed || key == underscored;
    };
    if (!is("cluster") && !is("node-name") && !is("advertise") && !is("cluster-secret") &&
        !is("cluster-secret-file") && !is("cluster-lease-s") && !is("cluster-prefix"))
        return false;
    if (!c.cluster) c.cluster.emplace();
    ClusterConfig& cluster = *c.cluster;
    if (is("cluster")) {
        if (value.rfind("etcd=", 0) != 0)
            throw std::invalid_argument("--cluster: expected etcd=URL[,URL...], got '" + value +
                                        "'");
        cluster.etcd.clear();
        std::string list = value.substr(5);
        for (std::size_t start = 0; start <= list.size();) {
            auto comma = list.find(',', start);
            std::string url = list.substr(start, comma - start);
            if (url.rfind("http://", 0) != 0 || url.size() <= 7)
                throw std::invalid_argument("--cluster: '" + url +
                                            "' is not an etcd client URL (http://HOST:PORT)");
            cluster.etcd.push_back(url);
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    } else if (is("node-name")) {
        if (!cluster::valid_node_name(value))
            throw std::invalid_argument(
                "--node-name: letters, digits, '.', '_' and '-', at most "
                "63, starting with a letter or digit; got '" +
                value + "'");
        cluster.node_name = value;
    } else if (is("advertise")) {
        if (value.rfind("http://", 0) != 0 || value.size() <= 7)
            throw std::invalid_argument("--advertise: expected http://HOST:PORT, got '" + value +
                                        "'");
        cluster.advertise = value;
        while (cluster.advertise.size() > 7 && cluster.advertise.back() == '/')
            cluster.advertise.pop_back();
    } else if (is("cluster-secret")) {
        cluster.secret = value;
    } else if (is("cluster-secret-file")) {
        cluster.secret = trimmed_file(value, key);
    } else if (is("cluster-lease-s")) {
        auto v = parse_integer(value);
        if (!v || *v < 2 || *v > 3600)
            throw std::invalid_argument("--cluster-lease-s: expected an integer in 2..3600, got '" +
                                        value + "'");
        cluster.lease_ttl = std::chrono::seconds(*v);
    } else {
        if (value.empty() || value.front() != '/' || value.back() != '/')
            throw std::invalid_argument("--cluster-prefix: expected /SOMETHING/, got '" + value +
                                        "'");
        cluster.prefix = value;
    }
    return true;
}

// What --cluster needs that its options did not give.
void complete_cluster(ServerConfig& c) {
    if (!c.cluster) return;
    ClusterConfig& cluster = *c.cluster;
    if (cluster.etcd.empty())
        throw std::invalid_argument("cluster options need --cluster etcd=URL[,URL...]");
    if (cluster.secret.empty())
        if (const char* env = std::getenv("DESKBOX_CLUSTER_SECRET")) cluster.secret = env;
    if (cluster.secret.size() < 16)
        throw std::invalid_argument(
            "--cluster needs a shared secret of 16+ characters (--cluster-secret, "
            "--cluster-secret-file or DESKBOX_CLUSTER_SECRET)");
    if (cluster.node_name.empty()) {
        char host[256] = {};
        if (::gethostname(host, sizeof host - 1) != 0 || !cluster::valid_node_name(host))
            throw std::invalid_argument("--node-name: the host name is not usable; give one");
        cluster.node_name = host;
    }
    // Checked now when the port is fixed; with port 0 once it is bound.
    if (cluster.advertise.empty() && c.http.port != 0)
        cluster.advertise = default_advertise(c.http.address, c.http.port);
}

// One --KEY VALUE (KEY dashed or underscored) as the option groups below read it.
struct Option {
    const std::string& key;
    const std::string& value;

    bool is(const char* dashed) const {
        std::string underscored = dashed;
        std::replace(underscored.begin(), underscored.end(), '-', '_');
        return key == dashed || key == underscored;
    }
    long long number(long long min, long long max) const {
        auto v = parse_integer(value);
        if (!v || *v < min || *v > max)
            throw std::invalid_argument("--" + key + ": expected an integer in " +
                                        std::to_string(min) + ".." + std::to_string(max) +
                                        ", got '" + value + "'");
        return *v;
    }
    double decimal(double min, double max) const {
        std::size_t used = 0;
        double v = -1;
        try {
            v = std::stod(value, &used);
        } catch (const std::exception&) {
        }
        if (used != value.size() || !(v >= min && v <= max))
            throw std::invalid_argument("--" + key + ": expected a number from " +
                                        std::to_string(min) + " to " + std::to_string(max) +
                                        ", got '" + value + "'");
        return v;
    }
};

// Usage sampling and its ledger (server/usage/), and how long events are kept. False for other
// options.
bool apply_usage(ServerConfig& c, const Option& o) {
    if (o.is("usage-sample-s")) {
        c.usage.sample_interval = std::chrono::seconds(o.number(0, 3600));
    } else if (o.is("metrics-keep-h")) {
        c.usage.keep = std::chrono::hours(o.number(1, 24 * 366));
    } else if (o.is("price-vcpu-second")) {
        c.usage.price_vcpu_second = o.decimal(0, 1e6);
    } else if (o.is("price-gib-second")) {
        c.usage.price_gib_second = o.decimal(0, 1e6);
    } else if (o.is("events-keep-days")) {
        c.event_retention.keep = std::chrono::hours(24 * o.number(1, 3660));
    } else if (o.is("events-max-undelivered")) {
        c.event_retention.max_undelivered = o.number(1, 1'000'000'000);
    } else {
        return false;
    }
    return true;
}

// The HTTP front door: where it listens, who may call, its limits. False for other options.
bool apply_http(ServerConfig& c, const Option& o) {
    const std::string& value = o.value;
    if (o.is("listen")) {
        auto colon = value.rfind(':');
        if (colon == std::string::npos) throw std::invalid_argument("--listen: expected ADDR:PORT");
        c.http.address = value.substr(0, colon);
        if (c.http.address.size() > 2 && c.http.address.front() == '[')
            c.http.address = c.http.address.substr(1, c.http.address.size() - 2);
        std::string port = value.substr(colon + 1);
        auto p = parse_integer(port);
        if (!p || *p < 0 || *p > 65535)
            throw std::invalid_argument("--listen: bad port '" + port + "'");
        c.http.port = static_cast<unsigned short>(*p);
    } else if (o.is("api-key")) {
        if (value.size() < 8) throw std::invalid_argument("--api-key: use at least 8 characters");
        c.api.api_keys.push_back(value);
    } else if (o.is("threads")) {
        c.http.threads = static_cast<std::size_t>(o.number(1, 256));
    } else if (o.is("max-handlers")) {
        c.http.max_handlers = static_cast<std::size_t>(o.number(1, 4096));
    } else if (o.is("max-body-mb")) {
        c.http.max_body_bytes = static_cast<std::size_t>(o.number(1, 4096)) << 20;
        c.api.max_upload_body = c.http.max_body_bytes;
    } else if (o.is("max-http-connections")) {
        c.http.max_connections = static_cast<std::size_t>(o.number(1, 1 << 20));
        c.max_http_connections_given = true;
    } else if (o.is("max-idle-http-connections")) {
        c.http.max_idle_connections = static_cast<std::size_t>(o.number(1, 1 << 20));
    } else if (o.is("max-header-kb")) {
        c.http.max_header_bytes = static_cast<std::size_t>(o.number(1, 1024)) << 10;
    } else if (o.is("max-body-in-flight-mb")) {
        c.http.max_body_in_flight = static_cast<std::size_t>(o.number(1, 65536)) << 20;
    } else if (o.is("allowed-host")) {
        const std::string name = host_name(value);
        if (name.empty() || name.find_first_of("/ @?#") != std::string::npos)
            throw std::invalid_argument("--allowed-host: expected a host name, got '" + value +
                                        "'");
        c.api.allowed_hosts.push_back(name);
    } else if (o.is("allowed-origin")) {
        if (value.rfind("http://", 0) != 0 && value.rfind("https://", 0) != 0)
            throw std::invalid_argument(
                "--allowed-origin: expected http://HOST[:PORT] or "
                "https://HOST[:PORT], got '" +
                value + "'");
        c.api.allowed_origins.push_back(value);
    } else {
        return false;
    }
    return true;
}

// Sandboxes: where their state and templates live, their defaults and limits. False for other
// options.
bool apply_sandboxes(ServerConfig& c, const Option& o) {
    const std::string& value = o.value;
    if (o.is("state-dir")) {
        c.manager.state_dir = value;
    } else if (o.is("cache-dir")) {
        c.manager.template_cache = value;
    } else if (o.is("images-dir")) {
        c.manager.images_dir = value;
    } else if (o.is("agent")) {
        c.manager.agent_binary = value;
    } else if (o.is("egress-ca-cert")) {
        std::ifstream in(value);
        if (!in) throw std::invalid_argument("--egress-ca-cert: cannot read " + value);
        std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        try {
            pem_certificates(pem);
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument("--egress-ca-cert " + value + ": " + e.what());
        }
        c.manager.egress_ca_pem = std::move(pem);
    } else if (o.is("default-runtime")) {
        // Which runtimes exist is the registry's to say: the manager checks the name.
        if (value.empty()) throw std::invalid_argument("--default-runtime: a runtime's name");
        c.manager.default_runtime = value;
    } else if (o.is("default-template")) {
        c.manager.default_template = value;
    } else if (o.is("max-sandboxes")) {
        c.manager.max_sandboxes = static_cast<std::size_t>(o.number(1, 10000));
    } else if (o.is("default-disk-mb")) {
        c.manager.default_disk_mb = static_cast<std::uint64_t>(o.number(0, 1 << 22));
    } else if (o.is("disk-overcommit")) {
        std::size_t used = 0;
        double ratio = -1;
        try {
            ratio = std::stod(value, &used);
        } catch (const std::exception&) {
        }
        if (used != value.size() || !(ratio >= 0 && ratio <= 1000))
            throw std::invalid_argument("--disk-overcommit: a ratio from 0 (off) to 1000, got '" +
                                        value + "'");
        c.manager.disk_overcommit = ratio;
    } else if (o.is("default-timeout")) {
        c.manager.default_timeout = std::chrono::seconds(o.number(1, 30 * 86400));
    } else if (o.is("max-timeout")) {
        c.manager.max_timeout = std::chrono::seconds(o.number(1, 30 * 86400));
    } else if (o.is("microvm-pool") || o.is("container-pool")) {
        // TEMPLATE=N: N sandboxes of TEMPLATE kept started and ready to hand out. The last '='
        // splits: a template users built is name:tag.
        const std::string flag = o.is("microvm-pool") ? "--microvm-pool" : "--container-pool";
        auto eq = value.rfind('=');
        if (eq == std::string::npos || eq == 0)
            throw std::invalid_argument(flag + ": expected TEMPLATE=N, got '" + value + "'");
        std::string count = value.substr(eq + 1);
        char* end = nullptr;
        long n = std::strtol(count.c_str(), &end, 10);
        if (count.empty() || *end != '\0' || n < 0 || n > 64)
            throw std::invalid_argument(flag + ": N must be an integer in 0..64");
        auto& pool = o.is("microvm-pool") ? c.manager.microvm_pool : c.manager.container_pool;
        pool[value.substr(0, eq)] = static_cast<std::size_t>(n);
    } else if (o.is("on-exit")) {
        if (value != "keep" && value != "kill")
            throw std::invalid_argument("--on-exit: keep or kill, got '" + value + "'");
        c.keep_sandboxes_on_sigterm = value == "keep";
    } else {
        return false;
    }
    return true;
}

// Templates users build: the registries their images may come from. False for other options.
bool apply_templates(ServerConfig& c, const Option& o) {
    auto& registries = c.manager.template_registries;
    if (o.is("template-registry") || o.is("template-registry-insecure")) {
        if (auto problem = templates::registry_entry_problem(o.value))
            throw std::invalid_argument("--" + o.key + ": " + *problem);
        (o.key.ends_with("insecure") ? registries.insecure : registries.allowed).push_back(o.value);
    } else if (o.is("template-pull-timeout-s")) {
        registries.pull_timeout = std::chrono::seconds(o.number(10, 86400));
    } else if (o.is("template-pull-max-mb")) {
        registries.max_pull_bytes = static_cast<std::uint64_t>(o.number(1, 1 << 24)) << 20;
    } else if (o.is("template-pull-keep-h")) {
        registries.keep_unused = std::chrono::hours(o.number(0, 24 * 365));
    } else if (o.is("template-disk-gb")) {
        c.manager.template_engine_disk_mb = static_cast<std::uint64_t>(o.number(2, 1 << 16)) << 10;
    } else {
        return false;
    }
    return true;
}

// Sandbox networks and the sandboxes' isolation from the host. False for other options.
bool apply_network(ServerConfig& c, const Option& o) {
    const std::string& value = o.value;
    if (o.is("default-network")) {
        if (value != "true" && value != "false")
            throw std::invalid_argument("--default-network: true or false, got '" + value + "'");
        c.manager.default_network =
            value == "true" ? network::NetworkPolicy::open() : network::NetworkPolicy::closed();
    } else if (o.is("dns-upstream")) {
        network::parse_dns_upstream(value);  // throws invalid_argument naming the flag
        c.manager.network.dns_upstream = value;
    } else if (o.is("public-range")) {
        std::string why;
        auto range = network::parse_ip_range(value, &why);
        if (!range) throw std::invalid_argument("--public-range '" + value + "': " + why);
        c.manager.network.public_ranges.push_back(*range);
    } else if (o.is("egress-proxy")) {
        // NAME=URL: one a sandbox may pick; URL alone: every sandbox's, unless it picks one.
        auto equals = value.find('=');
        auto scheme = value.find("://");
        try {
            if (equals != std::string::npos && equals < scheme) {
                const std::string name = value.substr(0, equals);
                network::NetworkPolicy::parse({{"proxy", name}});  // the names policies take
                c.manager.network.named_egress_proxies[name] =
                    network::parse_upstream_proxy(value.substr(equals + 1));
            } else {
                c.manager.network.egress_proxy = network::parse_upstream_proxy(value);
            }
        } catch (const std::exception& e) {
            throw std::invalid_argument(std::string("--egress-proxy: ") + e.what());
        }
    } else if (o.is("egress-trust-ca")) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(value, ec))
            throw std::invalid_argument("--egress-trust-ca '" + value + "': not a file");
        c.manager.network.egress_trust.push_back(std::filesystem::absolute(value));
    } else if (o.is("ports-domain")) {
        auto name = network::normalize_host_name(value);
        if (!name || name->find('.') == std::string::npos)
            throw std::invalid_argument("--ports-domain: expected a domain like ports.example.com");
        c.api.ports_domain = *name;
    } else if (o.is("egress-max-connections")) {
        c.egress_max_connections = static_cast<std::size_t>(o.number(1, 1 << 20));
    } else if (o.is("egress-half-closed-idle-s")) {
        c.manager.network.half_closed_idle = std::chrono::seconds(o.number(1, 86400));
    } else if (o.is("egress-first-bytes-ms")) {
        c.manager.network.first_bytes_timeout = std::chrono::milliseconds(o.number(100, 60000));
    } else if (o.is("mount-guest-written-volumes")) {
        if (value != "true" && value != "false")
            throw std::invalid_argument("--mount-guest-written-volumes: true or false, got '" +
                                        value + "'");
        c.manager.mount_guest_written_volumes = value == "true";
    } else if (o.is("userns")) {
        if (value != "true" && value != "false")
            throw std::invalid_argument("--userns: true or false, got '" + value + "'");
        c.manager.user_namespaces = value == "true";
    } else if (o.is("userns-range")) {
        const auto colon = value.find(':');
        auto first = parse_integer(value.substr(0, colon));
        auto slots =
            colon == std::string::npos ? std::nullopt : parse_integer(value.substr(colon + 1));
        if (!first || !slots || *first < 1 || *first > 0xFFFFFFFFll || *slots < 1 || *slots > 65535)
            throw std::invalid_argument("--userns-range: FIRST:N (host id, ranges), got '" + value +
                                        "'");
        c.manager.host_ids = {static_cast<std::uint32_t>(*first),
                              static_cast<std::uint32_t>(*slots)};
        if (auto problem = runtime::host_id_range_problem(c.manager.host_ids, "/nonexistent");
            !problem.empty())
            throw std::invalid_argument("--userns-range: " + problem);
    } else {
        return false;
    }
    return true;
}

void apply(ServerConfig& c, const std::string& key, const std::string& value) {
    const Option option{key, value};
    if (apply_cluster(c, key, value) || apply_http(c, option) || apply_sandboxes(c, option) ||
        apply_usage(c, option) || apply_templates(c, option) || apply_network(c, option))
        return;
    throw std::invalid_argument("unknown option '--" + key + "'");
}

}  // namespace

ServerConfig parse_server_config(const std::vector<std::string>& args) {
    ServerConfig c;
#ifdef DESKBOX_SOURCE_DIR
    c.manager.images_dir = std::string(DESKBOX_SOURCE_DIR) + "/images";
#endif
#ifdef DESKBOX_AGENT_BINARY
    c.manager.agent_binary = DESKBOX_AGENT_BINARY;
#endif
    if (const char* keys = std::getenv("DESKBOX_API_KEYS")) {
        std::string all = keys;
        std::size_t start = 0;
        while (start <= all.size()) {
            auto comma = all.find(',', start);
            std::string key = all.substr(start, comma - start);
            if (!key.empty()) apply(c, "api-key", key);
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    }
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i].rfind("--", 0) != 0)
            throw std::invalid_argument("unexpected argument '" + args[i] + "'");
        std::string key = args[i].substr(2);
        if (i + 1 >= args.size()) throw std::invalid_argument(args[i] + ": needs a value");
        std::string value = args[++i];
        if (key == "config") {
            std::ifstream in(value);
            if (!in) throw std::invalid_argument("--config: cannot read " + value);
            nlohmann::json j;
            try {
                j = nlohmann::json::parse(in);
            } catch (const std::exception& e) {
                throw std::invalid_argument("--config " + value + ": " + e.what());
            }
            if (!j.is_object()) throw std::invalid_argument("--config: expected a JSON object");
            for (auto& [k, v] : j.items()) {
                if (v.is_array() && (k == "api_keys" || k == "api-key" || k == "api_key")) {
                    for (auto& key_value : v) apply(c, "api-key", key_value.get<std::string>());
                } else if (v.is_array() && (k == "allowed_hosts" || k == "allowed-host" ||
                                            k == "allowed_origins" || k == "allowed-origin")) {
                    const std::string one =
                        k.find("host") != std::string::npos ? "allowed-host" : "allowed-origin";
                    for (auto& item : v) apply(c, one, item.get<std::string>());
                } else if (v.is_array() &&
                           (k == "public_range" || k == "public-range" || k == "public_ranges")) {
                    for (auto& range : v) apply(c, "public-range", range.get<std::string>());
                } else if (v.is_array() && (k == "egress_trust_ca" || k == "egress-trust-ca")) {
                    for (auto& file : v) apply(c, "egress-trust-ca", file.get<std::string>());
                } else if (v.is_array() && k.starts_with("template") &&
                           k.find("registr") != std::string::npos) {
                    // {"template_registry": ["reg.example:5000"]} (or _registries, _insecure)
                    const std::string one = k.find("insecure") != std::string::npos
                                                ? "template-registry-insecure"
                                                : "template-registry";
                    for (auto& item : v) apply(c, one, item.get<std::string>());
                } else if (k == "webhooks") {
                    c.webhooks =
                        events::parse_webhooks(v, std::filesystem::absolute(value).parent_path());
                } else if (v.is_object() && (k == "microvm_pool" || k == "microvm-pool" ||
                                             k == "container_pool" || k == "container-pool")) {
                    // {"microvm_pool": {"minimal": 2}}, {"container_pool": {"minimal": 4}}
                    for (auto& [name, n] : v.items()) apply(c, k, name + "=" + n.dump());
                } else {
                    apply(c, k, v.is_string() ? v.get<std::string>() : v.dump());
                }
            }
            continue;
        }
        apply(c, key, value);
    }
    complete_cluster(c);
    if (!is_loopback(c.http.address) && c.api.api_keys.empty())
        throw std::invalid_argument("refusing to listen on " + c.http.address +
                                    " without an API key (--api-key or DESKBOX_API_KEYS)");
    return c;
}

runtime::RuntimeRegistry make_runtimes(const ManagerOptions& options) {
    runtime::RuntimeRegistry runtimes;
    runtime::ContainerRuntimeOptions container;
    container.cgroup_parent = runtime::ContainerRuntime::cgroup_parent_for(options.state_dir);
    runtimes.add(std::make_unique<runtime::ContainerRuntime>(container));
    runtimes.add(std::make_unique<runtime::MicrovmRuntime>());
    return runtimes;
}

}  // namespace deskbox::server
