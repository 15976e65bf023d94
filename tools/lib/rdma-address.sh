# The address an example server listens on where verbs work: $COVERBS_DEMO_ADDRESS, else 10.77.0.1 in the
# Soft-RoCE guest, else the IPv4 address of the first RDMA device's network interface; empty when none.
# Sourced by tools/lib/demo-scenario and the examples' tests (they run inside the guest).
# shellcheck shell=bash
rdma_address() {
  local address=${COVERBS_DEMO_ADDRESS:-} netdev
  if [ -z "$address" ]; then
    if ip -o -4 addr show 2>/dev/null | grep -q ' 10\.77\.0\.1/'; then
      address=10.77.0.1
    else
      for netdev in $(rdma link show 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p'); do
        address=$(ip -o -4 addr show dev "$netdev" 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
        [ -n "$address" ] && break
      done
    fi
  fi
  printf '%s' "$address"
}
