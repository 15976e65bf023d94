# Shared by the scripts in tools/: messages, the cache folder, and what "the guest is ready" means.
# shellcheck shell=bash

prog=$(basename "$0")
say() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { printf '%s: error: %s\n' "$prog" "$*" >&2; exit 1; }

COVERBS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
COVERBS_CACHE=${COVERBS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coverbs}
COVERBS_GUEST_DIR=$COVERBS_CACHE/guest
COVERBS_LOG_DIR=$COVERBS_CACHE/logs
mkdir -p "$COVERBS_LOG_DIR"
# run_folder PREFIX: makes a new folder PREFIX.XXXXXX in $COVERBS_CACHE/runs (made first: a fresh machine has
# none until a guest has run) and prints its path.
run_folder() { mkdir -p "$COVERBS_CACHE/runs" && mktemp -d "$COVERBS_CACHE/runs/$1.XXXXXX"; }

# The guest image depends on these files; a change to any of them rebuilds it.
guest_stamp() {
  cat "$COVERBS_ROOT/tools/lib/make-guest" "$COVERBS_ROOT/tools/lib/guest-init" | sha256sum | cut -d' ' -f1
}

guest_ready() {
  [ -s "$COVERBS_GUEST_DIR/vmlinuz" ] && [ -s "$COVERBS_GUEST_DIR/initramfs.cpio.gz" ] &&
    [ -s "$COVERBS_GUEST_DIR/kernel-version" ] &&
    [ "$(cat "$COVERBS_GUEST_DIR/stamp" 2>/dev/null)" = "$(guest_stamp)" ]
}

# True when this host already has an RDMA device (then tests run on it directly).
host_has_rdma() {
  compgen -G '/sys/class/infiniband/*' >/dev/null 2>&1
}

# The guest sees the project at the same path; a path with blanks cannot be passed to it.
require_guest_paths() {
  host_has_rdma && return 0
  [[ $COVERBS_ROOT$COVERBS_CACHE != *[[:space:]]* ]] ||
    die "the project ($COVERBS_ROOT) or cache ($COVERBS_CACHE) path has blanks, which cannot cross into the Soft-RoCE guest; move the project or set COVERBS_CACHE"
}
