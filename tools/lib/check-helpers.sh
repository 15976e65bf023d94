# tools/lib/check-helpers.sh — sourced by tools/check: the helpers a check starts in the background (the
# leg's shared guests, the later legs' builds) and how they are stopped, however the check ends.
# The check runs under `set -e`: stop_helpers runs in its EXIT trap, where a failing command would replace
# the check's own exit status (a helper that already ended makes kill fail), so nothing here may fail.
session_pids= prebuild_pid= prebuild_dir=  # session_pids: the shared guests' rxe-vm processes, blank-separated
stop_helpers() {
  local p
  for p in $session_pids; do kill "$p" 2>/dev/null || true; done
  if [ -n "$prebuild_pid" ]; then kill -- -"$prebuild_pid" 2>/dev/null || true; fi
  if [ -n "$prebuild_dir" ]; then rm -rf "$prebuild_dir" || true; fi
}
