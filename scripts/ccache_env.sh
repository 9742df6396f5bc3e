# Sourced by the build scripts: one compiler cache for every checkout on this machine. Keys are
# content, not paths (base_dir makes paths relative; hash_dir off), so a fresh clone in another
# directory (CI) hits what an earlier build compiled.
export CCACHE_DIR=${CCACHE_DIR:-/var/cache/deskbox/ccache}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=1
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
mkdir -p "$CCACHE_DIR" 2>/dev/null || true
