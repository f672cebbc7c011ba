# shellcheck shell=bash
# Sourced by scripts/kube-env.sh and scripts/kube-node.sh, which must agree on it.
#
#   node_ip    print this machine's node address: the IPv4 source address of its default route, else its
#              first global IPv4 address; nothing (and status 1) when it has neither. A kubelet refuses a
#              loopback node IP, and pods reach the host (and an apiserver on it) only at such an address.
node_ip() {
  local ip
  ip="$(ip -4 -o route get 8.8.8.8 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')"
  [ -n "$ip" ] || ip="$(ip -4 -o addr show scope global 2>/dev/null | awk '{sub("/.*", "", $4); print $4; exit}')"
  [ -n "$ip" ] && echo "$ip"
}
