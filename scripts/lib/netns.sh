# Sourced by tests that need a cluster of nodes on one machine: each node is a network namespace joined to
# a bridge in the root namespace by a veth pair, on a private /24 (10.231.X.0/24, X picked unused). Processes
# in the root namespace (the apiserver, the controller, the test) reach every node at its address; nodes
# reach each other through the bridge. Nothing is routed beyond it.
#
#   netns_supported          0 when this process may create namespaces (root, `ip netns` works)
#   netns_up NODE...         create one namespace per node; sets netns_addr[NODE], netns_name[NODE],
#                            netns_veth[NODE] (the root-side end: `ip link set DEV down` cuts the node off)
#   netns_exec NODE CMD...   run CMD inside NODE's namespace
#   netns_down               delete every namespace, veth and the bridge netns_up made (idempotent)
#
# Names carry a per-run tag, so concurrent runs do not collide.

declare -A netns_addr=() netns_name=() netns_veth=()
netns_tag=""
netns_bridge=""

netns_supported() {
  [ "$(id -u)" -eq 0 ] || return 1
  command -v ip > /dev/null || return 1
  local probe="conduit-probe-$$"
  ip netns add "$probe" 2> /dev/null || return 1
  ip netns del "$probe" 2> /dev/null
  return 0
}

netns_up() {
  netns_tag="c$((RANDOM % 9000 + 1000))"
  netns_bridge="${netns_tag}br"
  local subnet="" x
  for _ in $(seq 50); do
    x=$((RANDOM % 200 + 20))
    if ! ip -o -4 addr show | grep -q " 10\.231\.$x\."; then
      subnet="10.231.$x"
      break
    fi
  done
  [ -n "$subnet" ] || { echo "netns: no free 10.231.X.0/24" >&2; return 1; }
  ip link add "$netns_bridge" type bridge || return 1
  ip addr add "$subnet.1/24" dev "$netns_bridge"
  # STP stays off (the default), so bridge ports forward at once: no learning delay to wait out.
  ip link set "$netns_bridge" up
  local i=10 node ns host peer
  for node in "$@"; do
    i=$((i + 1))
    ns="conduit-$netns_tag-$node"
    host="${netns_tag}h$i"
    peer="${netns_tag}p$i"
    ip netns add "$ns" || return 1
    ip link add "$host" type veth peer name "$peer" || return 1
    ip link set "$peer" netns "$ns"
    ip link set "$host" master "$netns_bridge"
    ip link set "$host" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$subnet.$i/24" dev "$peer"
    ip -n "$ns" link set "$peer" up
    netns_addr[$node]="$subnet.$i"
    netns_name[$node]="$ns"
    netns_veth[$node]="$host"
  done
}

netns_exec() {
  local node="$1"
  shift
  ip netns exec "${netns_name[$node]}" "$@"
}

netns_down() {
  local node
  for node in "${!netns_name[@]}"; do
    ip link del "${netns_veth[$node]}" 2> /dev/null || true
    ip netns del "${netns_name[$node]}" 2> /dev/null || true
  done
  [ -z "$netns_bridge" ] || ip link del "$netns_bridge" 2> /dev/null || true
  netns_addr=()
  netns_name=()
  netns_veth=()
  netns_bridge=""
}
