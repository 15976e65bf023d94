# Sourced by the runners that measure a rate beside perftest and UCX inside the Soft-RoCE guest (bench-rate,
# bench-calls): perftest's *_bw tools in duration mode and ucx_perftest's UCT *_bw tests, each launched as a
# server and a client on this host (the client to $addr), with the CPU time their processes spend while the
# figure is taken.
# shellcheck shell=bash
#
# Before peers_setup the runner sets: dev (the device), addr (its address), gid_index (perftest's -x, UCX's
# UCX_IB_GID_INDEX), ucx_tl (the UCT transport) and work (a folder of its own, removed when it ends).
#   perftest_rate TOOL SIZE CONNECTIONS DEPTH SECONDS [ARGS...]
#       TOOL (ib_send_bw, ib_write_bw, ib_read_bw) -s SIZE -q CONNECTIONS -t DEPTH -D SECONDS -f 1 (their default
#       CQ moderation, busy polling) and ARGS; prints "MSG_PER_S CPU_US_PER_MSG", or nothing (the reason on
#       stderr). The client's report stays in $work/client.txt (perftest_setting and perftest_bytes_per_s read it).
#   ucx_rate TEST SIZE OUTSTANDING SECONDS [ARGS...]
#       ucx_perftest -x $ucx_tl -d $dev:1 -t TEST (put_bw, am_bw) -s SIZE with -O OUTSTANDING (am_bw's flow-
#       control window -W at most its limit 127) and ARGS, run until SECONDS of its one-second progress lines have
#       come, then stopped; prints "MSG_PER_S CPU_US_PER_MSG", or nothing (the reason on stderr).
# CPU per message: perftest, the CPU ticks (/proc/PID/stat utime + stime) of client and server between two reads
# inside the measuring window, per second, / the message rate; UCX, their ticks between the first and the last
# progress line used / the iterations between them.

peers_setup() {
  hz=$(getconf CLK_TCK)
  mkfifo "$work/tick"
  exec 9<>"$work/tick"  # nothing is ever written: `read -t` on it is a sleep without a new process
}
peers_say() { echo "$(basename "$0"): $*" >&2; }
nap() { read -r -t "$1" -u 9 _ || true; }
# The CPU ticks (utime + stime) of the programs that the `timeout` processes $@ run, into $ticks; how many
# of them were still there to read, into $found.
ticks_of() {
  local p c s f
  ticks=0 found=0
  for p; do
    c=
    read -r c _ <"/proc/$p/task/$p/children" 2>/dev/null || [ -n "$c" ] || continue  # no newline at its end
    read -r s <"/proc/$c/stat" 2>/dev/null || continue
    read -ra f <<<"${s##*) }"  # the fields after the program's name: utime and stime are the 12th and 13th
    ticks=$((ticks + f[11] + f[12])) found=$((found + 1))
  done
}
now_us() { now=${EPOCHREALTIME/./}; }
# wait_lines FILE COUNT PATTERN SECONDS PID: waits until FILE holds COUNT lines matching PATTERN (a bash
# pattern), at most SECONDS and while PID runs; those lines in $matched, the time (us) in $now.
wait_lines() {
  local i l
  for ((i = 0; i < $4 * 20; i++)); do
    mapfile -t lines <"$1"
    matched=()
    # shellcheck disable=SC2053  # $3 is a pattern
    for l in "${lines[@]}"; do [[ $l == $3 ]] && matched+=("$l"); done
    now_us
    ((${#matched[@]} >= $2)) && return 0
    kill -0 "$5" 2>/dev/null || return 1
    nap 0.05
  done
  return 1
}
# Waits (up to 30 s) until something listens on TCP port $1.
wait_listen() {
  local i
  for ((i = 0; i < 60; i++)); do
    ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
    nap 0.5
  done
  return 1
}
# A fresh TCP port for each launch, kept in a file: the peers run in the subshells of $(...).
next_port() { port=$(($(cat "$work/port" 2>/dev/null || echo 18950) + 1)); echo "$port" >"$work/port"; }
stop() { local p; for p; do kill "$p" 2>/dev/null || true; done; for p; do wait "$p" 2>/dev/null || true; done; }

# A setting perftest's client printed in its last run ("Max inline data", "CQ Moderation"), as digits.
perftest_setting() { awk -F: -v k="$1" 'index($0, k) {gsub(/[^0-9]/, "", $2); print $2; exit}' "$work/client.txt"; }
# The bandwidth of perftest's last run in bytes/s, from its "BW average" (for large messages its MsgRate, printed
# to a millionth of Mpps, is whole messages a second: 1 MiB messages at 30/s would be 3 % apart). Its MB is read
# as 10^6 or 2^20 bytes, whichever puts the figure nearer MsgRate × SIZE.
perftest_bytes_per_s() {  # SIZE
  awk -v s="$1" '/BW average/ {getline; m = $5 * 1e6 * s; a = $4 * 1e6; b = $4 * 1048576
                               printf "%.1f\n", ((m - a) ^ 2 < (m - b) ^ 2 ? a : b); exit}' "$work/client.txt"
}
perftest_rate() {
  local tool=$1 size=$2 conns=$3 depth=$4 seconds=$5 try
  shift 5
  local opts=(-d "$dev" -x "$gid_index" -F -s "$size" -t "$depth" -q "$conns" -D "$seconds" -f 1 "$@")
  for try in 1 2 3; do
    next_port
    timeout 120 "$tool" "${opts[@]}" -p "$port" >"$work/server.txt" 2>&1 &
    local spid=$! t0='' t1='' c0='' c1=
    wait_listen "$port" || nap 3
    : >"$work/client.txt"
    timeout 120 stdbuf -oL "$tool" "${opts[@]}" -p "$port" "$addr" >"$work/client.txt" 2>&1 &
    local cpid=$!
    # The table's heading is printed as the traffic starts; the figure covers [1 s, D - 1 s] from there.
    if wait_lines "$work/client.txt" 1 '*#bytes*' 120 "$cpid"; then
      nap 0.7; now_us; t0=$now; ticks_of "$cpid" "$spid"; c0=$ticks
      nap "$((seconds - 2)).6"; now_us; t1=$now; ticks_of "$cpid" "$spid"; c1=$ticks
      ((found == 2)) || t0=''  # a program had ended: the second reading missed its ticks
    fi
    if wait "$cpid"; then
      wait "$spid" 2>/dev/null || true
      local rate
      rate=$(awk '/MsgRate/ {getline; print $5 * 1e6; exit}' "$work/client.txt")
      if [ -n "$t0" ] && awk -v r="$rate" 'BEGIN { exit !(r > 0) }'; then
        awk -v r="$rate" -v c="$((c1 - c0))" -v hz="$hz" -v us="$((t1 - t0))" \
          'BEGIN { printf "%.1f %.3f\n", r, c / hz / (us / 1e6) / r * 1e6 }'
        return 0
      fi
      peers_say "$tool attempt $try: ${t0:+no message rate in its output}${t0:-its measuring window was" \
        "missed (the client printed its heading late, or ended before the second CPU reading)}"
    else
      stop "$spid"
      peers_say "$tool attempt $try failed: $(tail -1 "$work/client.txt")"
    fi
  done
}
ucx_rate() {
  if ! command -v ucx_perftest >/dev/null; then
    peers_say "ucx_perftest is not installed (Debian package ucx-utils; tools/bootstrap installs it)"
    return 0
  fi
  local test=$1 size=$2 outstanding=$3 seconds=$4 try args
  shift 4
  args=(-x "$ucx_tl" -d "$dev:1" -t "$test" -s "$size" -O "$outstanding" -n 1000000000 -w 1000 -v "$@")
  [ "$test" = am_bw ] && args+=(-W "$((outstanding < 127 ? outstanding : 127))")
  for try in 1 2 3; do
    next_port
    UCX_IB_GID_INDEX=$gid_index timeout 120 ucx_perftest -p "$port" "${args[@]}" >"$work/ucx-server.txt" 2>&1 &
    local spid=$! c0 t0 first seen
    wait_listen "$port" || nap 3
    : >"$work/ucx-client.txt"
    UCX_IB_GID_INDEX=$gid_index timeout 120 stdbuf -oL ucx_perftest "$addr" -p "$port" "${args[@]}" \
      >"$work/ucx-client.txt" 2>&1 &
    local cpid=$!
    # A progress line a second: "[thread 0]ITERATIONS,P50,AVG_LAT,OVERALL_LAT,AVG_BW,OVERALL_BW,AVG_MR,OVERALL_MR".
    if wait_lines "$work/ucx-client.txt" 1 '\[thread 0\]*' 120 "$cpid"; then
      ticks_of "$cpid" "$spid"; c0=$ticks t0=$now first=${matched[-1]#*]} seen=${#matched[@]}
      if wait_lines "$work/ucx-client.txt" $((seen + seconds)) '\[thread 0\]*' $((seconds + 30)) "$cpid" &&
        ticks_of "$cpid" "$spid" && ((found == 2)); then
        stop "$cpid" "$spid"
        awk -v a="$first" -v b="${matched[-1]#*]}" -v c="$((ticks - c0))" -v hz="$hz" -v us="$((now - t0))" \
          'BEGIN { split(a, x, ","); split(b, y, ","); n = y[1] - x[1]
                   if (n > 0 && us > 0) printf "%.1f %.3f\n", n / (us / 1e6), c / hz / n * 1e6 }'
        return 0
      fi
    fi
    stop "$cpid" "$spid"
    peers_say "ucx_perftest ${args[*]} attempt $try failed: $(grep -h -E 'ERROR|Fatal:' "$work/ucx-client.txt" \
      "$work/ucx-server.txt" | tail -1 | cut -c1-200)"
  done
}
