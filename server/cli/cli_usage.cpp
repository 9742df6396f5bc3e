// What 'deskbox --help' and 'deskbox COMMAND --help' print.
#include "server/cli/cli_commands.hpp"

#include <map>

namespace deskbox::cli {

using client::ApiError;
using client::Method;
using client::Query;
using nlohmann::json;

namespace {

const char* const kMainUsage = R"(usage: deskbox [--server URL] [--api-key KEY] COMMAND [ARGS...]

A client of deskboxd's HTTP API (default server http://127.0.0.1:8700; environment
DESKBOX_SERVER and DESKBOX_API_KEY set the defaults).

Sandboxes:
  create [--template minimal] [--runtime container] [--size 1280x800] [--timeout 300]
         [--network on|off] [--allow DOMAIN|IP|CIDR]... [--deny ...]... [--json]
  ports ID [--json]          (exposed ports: what listens, and the URL to reach each)
  list [--json]              inspect ID          kill ID...
  pause ID [--snapshot]      resume ID           timeout ID SECONDS
  create --snapshot NAME [--auto-resume]   fork ID [--count N]   (copies of ID as it is now)
Desktop:
  screenshot ID [-o FILE|-] [--format png|jpeg|webp] [--quality N] [--width N] [--height N]
  act ID 'JSON action or {"actions":[...]}'|- [--dialect native|anthropic|openai]
  click ID X Y [--button left|right|middle] [--count N]     move ID X Y
  click ID --text TEXT|--image FILE [--index N] [--offset DX,DY]   (also move)
  scroll ID X Y DY [--dx N]      type ID TEXT      key ID COMBO (e.g. ctrl+shift+t)
  windows ID [--json]     cursor ID [--json]     clipboard get ID     clipboard set ID TEXT|-
Seeing the screen:
  wait ID [--until change|stable|image|text|gone] [--text T|--image F] [--region X,Y,W,H]
  locate ID --text T|--image F.png [--region ...]    ocr ID [--region ...] [--json]
  compare ID BASELINE.png [--mask X,Y,W,H]... [--tolerance N] [--diff OUT.png]
Commands and files:
  exec ID [--env NAME=VALUE]... [--cwd DIR] [--timeout S] [--background] [-i] [--] CMD [ARG...]
  exec ID --shell 'LINE'
  files get ID PATH [-o LOCAL]    files put ID LOCAL|- PATH [--mode M]
  files ls ID PATH                files rm ID PATH [-r]
Usage (what sandboxes used, kept after they are gone):
  usage [--from TIME] [--to TIME] [--group-by template|day|metadata.KEY] [--csv|--json]
  metrics ID [--from TIME] [--to TIME] [--step SECONDS] [--json]
  events [--sandbox ID] [--types T,...] [--after EVENT_ID] [--count N] [--json]   (live)
Other:
  demo [--template minimal] [-o demo.png] [--keep]    health    help [COMMAND]
  mcp [--sandbox ID | --create TEMPLATE]              (MCP over stdio)
Templates (your own, from a Dockerfile or an image archive):
  template build NAME[:TAG] [-f Dockerfile] [CONTEXT_DIR] [--build-arg K=V]... [--start-cmd CMD]
         [--ready-cmd CMD] [--no-cache] [--network on|off|JSON] [--timeout S] [-q] [-d]
  template import NAME[:TAG] FILE.tar|- [--format oci-archive|docker-archive]
  template import NAME[:TAG] --image REGISTRY[:PORT]/REPO[:TAG|@sha256:D]
  template ls [--json]    template inspect NAME[:TAG]    template rm NAME[:TAG]...
  template builds [--json]    template logs BUILD_ID [-f]    template cancel BUILD_ID...
Volumes (data that outlives sandboxes; create --volume NAME:PATH[:ro] mounts one):
  volume create NAME [--size MB] [--label K=V]...    volume ls [--json]
  volume inspect NAME    volume rm NAME...
Secrets (write-only; create --inject DOMAIN[/PATH]:HEADER=secret:NAME puts one into requests):
  secret set NAME [--from-file F] (the value on stdin)    secret ls [--json]    secret rm NAME...
Snapshots (a sandbox saved under a name; create --snapshot NAME starts a sandbox from it):
  snapshot create ID NAME [--metadata K=V]...    snapshot ls [--json]
  snapshot inspect NAME    snapshot rm NAME...
Cluster (deskboxd --cluster):
  node list [--json]      node drain NAME      node undrain NAME

Exit codes: 0 ok, 1 API or connection error, 2 usage error, 3 no match (wait timed out, locate
found nothing, compare differs); exec exits with the command's code.
Run 'deskbox COMMAND --help' for a command's options.
)";

const std::map<std::string, std::string> kUsage = {
    {"create",
     "usage: deskbox create [--template NAME] [--runtime container|microvm] [--size WxH]\n"
     "         [--timeout SECONDS] [--dpi N] [--api-size WxH] [--on-timeout kill|pause]\n"
     "         [--memory MB] [--cpus N] [--pids N] [--disk MB] [--env NAME=VALUE]...\n"
     "         [--meta NAME=VALUE]... [--volume NAME:PATH[:ro]]... [--snapshot NAME] "
     "[--auto-resume]\n"
     "         [--network on|off] [--allow ENTRY]... [--deny ENTRY]... [--egress-kbps N] [--json]\n"
     "         [--inject DOMAIN[/PATH]:HEADER=VALUE|secret:NAME]... [--proxy NAME]\n"
     "Creates a sandbox and prints its id (--json: the whole answer). Defaults: --template\n"
     "minimal --runtime container --size 1280x800 --timeout 300, the server's network default.\n"
     "--allow/--deny: a domain (example.org), a wildcard (*.example.org), an IP or a CIDR; with\n"
     "--allow only those are reached, --deny alone takes names or ranges off the internet.\n"
     "--inject: the egress proxy sets HEADER on the sandbox's HTTP and HTTPS requests to DOMAIN\n"
     "(or *.DOMAIN) under PATH; secret:NAME is a value stored with deskbox secret set, which the\n"
     "sandbox never holds.\n"
     "--proxy: send the sandbox's egress through the upstream proxy the server names NAME\n"
     "(deskboxd --egress-proxy NAME=URL).\n"
     "--volume: mount a volume (deskbox volume create) at PATH, read-only with :ro; one sandbox\n"
     "may write a volume at a time.\n"
     "--snapshot: start from a snapshot (deskbox snapshot create); its template, runtime, size,\n"
     "dpi and limits are the snapshot's (--template and --size default to them).\n"
     "--auto-resume: a sandbox its timeout paused resumes on the next request that needs it\n"
     "(implies --on-timeout pause)."},
    {"ports",
     "usage: deskbox ports ID [--json]\n"
     "Lists the TCP ports programs in the sandbox listen on, with the URL deskboxd serves each\n"
     "at (authorised by the sandbox's control token)."},
    {"list", "usage: deskbox list [--json]"},
    {"usage",
     "usage: deskbox usage [--from TIME] [--to TIME] [--group-by template|day|metadata.KEY]\n"
     "         [--csv|--json]\n"
     "What sandboxes used in the period, sandboxes long gone included (TIME: RFC 3339 or Unix\n"
     "seconds; default: everything recorded, up to now). A cost column when deskboxd has prices."},
    {"metrics",
     "usage: deskbox metrics ID [--from TIME] [--to TIME] [--step SECONDS] [--json]\n"
     "A sandbox's samples (CPU %, memory, disk, network), also after it ended."},
    {"events",
     "usage: deskbox events [--sandbox ID] [--types created,killed,...] [--after EVENT_ID]\n"
     "         [--count N] [--json]\n"
     "Prints lifecycle events as they happen (created, ready, paused, resumed, timeout, killed,\n"
     "error, snapshot_created), one line each (--json: the event's JSON), until interrupted or\n"
     "N were printed. --after resumes after an event id seen before (the log is durable; in a\n"
     "cluster an id names its node, \"node-a:42\", and only that node resumes after it);\n"
     "--sandbox follows one sandbox's events."},
    {"inspect", "usage: deskbox inspect ID"},
    {"kill", "usage: deskbox kill ID..."},
    {"pause", "usage: deskbox pause ID [--snapshot]"},
    {"resume", "usage: deskbox resume ID"},
    {"timeout", "usage: deskbox timeout ID SECONDS\nSets the sandbox to expire SECONDS from now."},
    {"network",
     "usage: deskbox network ID [--allow DEST]... [--deny DEST]... [--inject RULE]...\n"
     "         [--allow-all] [--no-deny] [--no-rules] [--egress-kbps N] [--proxy NAME]\n"
     "         [--default-proxy]\n"
     "Changes a running sandbox's network policy: each part given replaces that part (--allow\n"
     "the allow list, --deny the deny list, --inject the credential rules, --proxy the egress\n"
     "proxy, as create takes them); --allow-all, --no-deny, --no-rules and --default-proxy\n"
     "remove a part; the others stay. Open\n"
     "connections the new policy forbids are cut at once. Prints the sandbox's network."},
    {"screenshot",
     "usage: deskbox screenshot ID [-o FILE|-] [--format png|jpeg|webp] [--quality N]\n"
     "         [--width N] [--height N]\n"
     "Saves to FILE (default screenshot-ID.EXT) and prints its path; -o - writes the image to "
     "stdout."},
    {"act",
     "usage: deskbox act ID JSON|- [--dialect native|anthropic|openai]\n"
     "Sends one action or {\"actions\":[...]} (- reads it from stdin) and prints the results."},
    {"click",
     "usage: deskbox click ID X Y [--button left|right|middle] [--count N]\n"
     "       deskbox click ID --text TEXT|--image FILE.png [--index N] [--offset DX,DY]\n"
     "         [--region X,Y,W,H] [--threshold F] [--exact] [--timeout-ms N] [...]\n"
     "With a target the server finds it on the screen (waiting up to --timeout-ms, default\n"
     "5000) and clicks its centre; prints where."},
    {"move",
     "usage: deskbox move ID X Y\n"
     "       deskbox move ID --text TEXT|--image FILE.png [target options as for click]"},
    {"wait",
     "usage: deskbox wait ID [--until change|stable|image|text|gone] [--text TEXT|--image FILE]\n"
     "         [--region X,Y,W,H] [--timeout-ms N] [--stable-ms N] [--threshold F] [--json]\n"
     "Returns as soon as the screen (or region) changes, has been still for --stable-ms, shows\n"
     "the text or image, or no longer does (gone). Default --until: text or image when given,\n"
     "else change; default --timeout-ms 10000. Exit 0 matched, 3 timed out."},
    {"locate",
     "usage: deskbox locate ID --image FILE.png|--text TEXT [--region X,Y,W,H] [--threshold F]\n"
     "         [--max-results N] [--grayscale] [--exact] [--lang eng] [--json]\n"
     "Prints X Y WIDTH HEIGHT and the score of each match, best first (text: in reading order).\n"
     "Exit 3 when nothing matched."},
    {"ocr",
     "usage: deskbox ocr ID [--region X,Y,W,H] [--lang eng] [--min-confidence N] [--json]\n"
     "Prints the text on the screen (--json: lines and words with boxes and confidence)."},
    {"compare",
     "usage: deskbox compare ID BASELINE.png [--region X,Y,W,H] [--mask X,Y,W,H]...\n"
     "         [--tolerance N] [--diff OUT.png] [--json]\n"
     "Compares the screen (or the region) with BASELINE: exit 0 identical, 3 different (the\n"
     "changed boxes are printed). --diff saves the screen dimmed with the changes in red."},
    {"scroll", "usage: deskbox scroll ID X Y DY [--dx N]\nDY in wheel notches, positive = down."},
    {"type", "usage: deskbox type ID TEXT"},
    {"key", "usage: deskbox key ID COMBO\nCOMBO like enter, ctrl+c, ctrl+shift+t."},
    {"exec",
     "usage: deskbox exec ID [--env NAME=VALUE]... [--cwd DIR] [--timeout S] [--background] [-i]\n"
     "         [--] CMD [ARG...]\n"
     "       deskbox exec ID [options] --shell 'LINE'\n"
     "Runs a command in the sandbox, prints its stdout and stderr and exits with its code.\n"
     "-i sends this program's stdin to it; --background prints the pid and returns at once."},
    {"files",
     "usage: deskbox files get ID PATH [-o LOCAL|-]\n"
     "       deskbox files put ID LOCAL|- PATH [--mode 0644]\n"
     "       deskbox files ls ID PATH [--json]\n"
     "       deskbox files rm ID PATH [-r]\n"
     "PATH is absolute, inside the sandbox; files get writes to stdout without -o."},
    {"windows", "usage: deskbox windows ID [--json]"},
    {"kill-processes",
     "usage: deskbox kill-processes ID\n"
     "Ends every process in the sandbox but the desktop session (agent, X server, window\n"
     "manager): the way back for a sandbox at its process or memory limit."},
    {"clipboard", "usage: deskbox clipboard get ID\n       deskbox clipboard set ID TEXT|-"},
    {"cursor", "usage: deskbox cursor ID [--json]\nPrints X Y."},
    {"health", "usage: deskbox health\nPrints the server's /healthz answer."},
    {"node",
     "usage: deskbox node list [--json]\n"
     "       deskbox node drain NAME\n"
     "       deskbox node undrain NAME\n"
     "The nodes of a cluster (deskboxd --cluster): their state, sandboxes and capacity; the one\n"
     "answering is starred. A drained node keeps its sandboxes and gets no new ones."},
    {"demo",
     "usage: deskbox demo [--template minimal] [--runtime R] [--size WxH] [-o demo.png] [--keep]\n"
     "         [--wait SECONDS] [--start-terminal-after SECONDS]\n"
     "Creates a sandbox, types a greeting into a terminal, saves a screenshot and prints the\n"
     "viewer URL; kills the sandbox unless --keep. A terminal is started with xterm if none\n"
     "shows within --start-terminal-after seconds (default 3); --wait bounds the whole wait\n"
     "(default 120)."},
    {"template",
     "usage: deskbox template build NAME[:TAG] [-f DOCKERFILE] [CONTEXT_DIR] [--build-arg K=V]...\n"
     "         [--start-cmd CMD] [--ready-cmd CMD] [--no-cache] [--network on|off|JSON]\n"
     "         [--timeout S] [--part-mb N] [-q|--quiet] [-d|--detach]\n"
     "       deskbox template import NAME[:TAG] FILE.tar|- [--format oci-archive|docker-archive]\n"
     "         [--start-cmd CMD] [--ready-cmd CMD] [--timeout S] [--part-mb N] [-q] [-d]\n"
     "       deskbox template import NAME[:TAG] --image REGISTRY[:PORT]/REPO[:TAG|@sha256:D]\n"
     "         [--start-cmd CMD] [--ready-cmd CMD] [--timeout S] [-q] [-d]\n"
     "       deskbox template ls [--json]\n"
     "       deskbox template inspect NAME[:TAG]\n"
     "       deskbox template rm NAME[:TAG]...\n"
     "       deskbox template builds [--json]\n"
     "       deskbox template logs BUILD_ID [-f|--follow]\n"
     "       deskbox template cancel BUILD_ID...\n"
     "build sends CONTEXT_DIR (default .) as a tar, leaving out what its .dockerignore excludes\n"
     "(symlinks are sent as links: nothing outside the directory), builds it into the template\n"
     "NAME:TAG (default tag latest) and prints the build's log as it grows; on a terminal stderr\n"
     "shows the step it is at. -f FILE: the Dockerfile (default CONTEXT_DIR/Dockerfile; one\n"
     "outside the directory is sent as text). --start-cmd: what a sandbox of it starts (sh -c;\n"
     "default the image's ENTRYPOINT + CMD); --ready-cmd: a command that succeeds once it is\n"
     "ready. --network: the RUN steps' network (default the server's); --timeout: the whole\n"
     "build's, in seconds (default 1800). Uploads go in parts of --part-mb (default 32; the\n"
     "server's --max-body-mb bounds it). -q: no log, only the result; -d: print the build id and\n"
     "return at once (then template logs BUILD_ID -f). ^C cancels the build.\n"
     "import takes an image archive (docker save, skopeo copy ... oci-archive:F) the same way,\n"
     "or with --image an image the server pulls from a registry its --template-registry allows.\n"
     "Exit codes of build, import and logs -f: 0 built, 1 failed, cancelled or an API error\n"
     "(the failing step, its exit code and the message are on stderr), 130 interrupted.\n"
     "A sandbox of it: deskbox create --template NAME[:TAG]."},
    {"volume",
     "usage: deskbox volume create NAME [--size MB] [--label K=V]... [--json]\n"
     "       deskbox volume ls [--json]\n"
     "       deskbox volume inspect NAME\n"
     "       deskbox volume rm NAME...\n"
     "A volume is a filesystem of --size MB (default 1024; writes past it fail with ENOSPC) that\n"
     "outlives sandboxes and server restarts. Mount it with deskbox create --volume\n"
     "NAME:/data (or NAME:/data:ro); rm is refused while a sandbox mounts it."},
    {"secret",
     "usage: deskbox secret set NAME [--from-file FILE] [--json]   (the value on stdin)\n"
     "       deskbox secret ls [--json]\n"
     "       deskbox secret rm NAME...\n"
     "A secret is a value deskboxd keeps (0600 under its state dir) and never shows again: ls\n"
     "lists names only. A sandbox's credential rule puts it into the requests the egress proxy\n"
     "carries (deskbox create --inject api.example.com:Authorization=secret:NAME), so the\n"
     "sandbox uses it without ever holding it. set replaces a value; rules use the new one."},
    {"snapshot",
     "usage: deskbox snapshot create ID NAME [--metadata K=V]... [--json]\n"
     "       deskbox snapshot ls [--json]\n"
     "       deskbox snapshot inspect NAME\n"
     "       deskbox snapshot rm NAME...\n"
     "create saves the sandbox ID as NAME ([a-z0-9][a-z0-9_.-]{0,62}); deskbox create --snapshot\n"
     "NAME starts sandboxes from it. A microVM's snapshot (kind memory) holds its memory and "
     "disk:\n"
     "its programs keep running in the new sandbox. A container's (kind filesystem) holds the\n"
     "files it wrote: programs start fresh."},
    {"fork",
     "usage: deskbox fork ID [--count N] [--timeout SECONDS] [--meta NAME=VALUE]... [--json]\n"
     "Starts N (1..16, default 1) copies of the sandbox as it is now and prints their ids, one a\n"
     "line (--json: the whole answer, with their tokens). A microVM's copies go on where it is; a\n"
     "container's have its files, with programs started fresh."},
    {"mcp",
     "usage: deskbox mcp [--sandbox ID [--token CONTROL_TOKEN] | --create TEMPLATE [--runtime R]]\n"
     "MCP over stdio for desktop MCP clients, bridged to deskboxd's /mcp. --sandbox: the\n"
     "session's sandbox (with --token, the session may use only that one); --create: a new\n"
     "sandbox, killed when stdin ends."},
};

}  // namespace

const std::string& main_usage() {
    static const std::string text = kMainUsage;
    return text;
}

const std::string& usage_of(const std::string& command) {
    static const std::string none;
    auto it = kUsage.find(command);
    return it == kUsage.end() ? none : it->second;
}

}  // namespace deskbox::cli
