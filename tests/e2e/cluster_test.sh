#!/usr/bin/env bash
# A four-node cluster on one machine, end to end: a real kube-apiserver (scripts/kube-env.sh), four
# conduit-agents each in its own network namespace (node-a..node-d, veth addresses on a private bridge), the
# agent Service's EndpointSlice listing them as a kubelet-backed cluster would, and the conduit-controller in
# Kubernetes mode discovering them from it. Then, with real kubectl, the shipped examples run as a user runs
# them: point-to-point, fanout 1->3 and file load, all at once; the bytes each target ends up with are saved
# by its agent and compared with the source files byte for byte. Last, a node's link is cut and restored and
# its FabricNode follows.
#
#   tests/e2e/cluster_test.sh [BUILD_DIR]      (default: build)
#
# Prints "ok - ..." per check and "cluster e2e: N passed, 0 failed"; on failure one line of why, exit 1.
# Needs root (network namespaces); without them it says so and exits 0 as skipped.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
bin="$build/bin"
passed=0
fail() {
  echo "cluster e2e: FAILED: $*" >&2
  echo "cluster e2e: $passed passed, 1 failed"
  exit 1
}
pass() { passed=$((passed + 1)); echo "ok - $*"; }

source "$root/scripts/lib/netns.sh"
source "$root/scripts/lib/agents.sh"
source "$root/scripts/lib/kube.sh"
if ! netns_supported; then
  echo "cluster e2e: SKIPPED: cannot create network namespaces here (needs root and a working 'ip netns')"
  exit 0
fi
for b in conduit-agent conduit-controller; do [ -x "$bin/$b" ] || fail "no $bin/$b: build first"; done
KUBECTL="${KUBECTL:-$("$root/scripts/kube-tools.sh" --print 2> /dev/null | sed -n 's/^KUBECTL=//p')}"
[ -x "$KUBECTL" ] || fail "no kubectl: run scripts/kube-tools.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-cluster-e2e.XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  netns_down
  "$root/scripts/kube-env.sh" stop "$work/env" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ns=conduit-e2e
kube_up "$ns"

# ---- four nodes, one agent each, listening on its veth address
nodes=(node-a node-b node-c node-d)
netns_up "${nodes[@]}" || fail "could not create the network namespaces"
(umask 077; openssl rand -hex 32 > "$work/token")
token="$(cat "$work/token")"
port=7070
for n in "${nodes[@]}"; do
  mkdir -p "$work/$n/checkpoints"
  NODE_NAME=$n netns_exec "$n" "$bin/conduit-agent" --listen "${netns_addr[$n]}:$port" --providers tcp \
    --bind-address "${netns_addr[$n]}" --token-file "$work/token" --data-dir "$work/$n" --memory-cap 1GiB \
    --import-socket "$work/$n.sock" --log-level warn > "$work/$n.out" 2> "$work/$n.log" &
  pids+=($!)
done
for n in "${nodes[@]}"; do
  agent_listening "$n" || fail "agent $n did not start: $(tail -n 3 "$work/$n.log")"
done
pass "4 agents in network namespaces at $(for n in "${nodes[@]}"; do printf '%s ' "${netns_addr[$n]}"; done)"

# agent NODE METHOD PATH [BODY]: the agent's REST API, from the root namespace as the controller calls it.
agent() {
  curl -s --max-time 60 -X "$2" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    ${4:+--data "$4"} "http://${netns_addr[$1]}:$port$3"
}

# ---- the agent Service and its EndpointSlice: what the endpointslice controller writes for a DaemonSet
agent_endpointslice "$port" "${nodes[@]}" > "$work/service.yaml"
r="$(kc apply -f "$work/service.yaml" 2>&1)" || fail "Service/EndpointSlice rejected: $r"

"$bin/conduit-controller" --kubeconfig "$KUBECONFIG" --namespace "$ns" --agent-service conduit-agent \
  --agent-service-namespace "$ns" --agent-token-file "$work/token" --log-level warn \
  > "$work/controller.out" 2> "$work/controller.log" &
controller=$!
pids+=($controller)

reachable() { kc get fabricnode "$1" -o jsonpath='{.status.conditions[?(@.type=="Reachable")].status}' 2> /dev/null; }
all_reachable() {
  for n in "${nodes[@]}"; do [ "$(reachable "$n")" = True ] || return 1; done
}
for _ in $(seq 60); do all_reachable && break; sleep 0.5; done
all_reachable || fail "not every FabricNode is Reachable=True after 30 s: $(kc get fabricnodes 2>&1 | tr '\n' ' ')
controller log: $(tail -n 5 "$work/controller.log")"
kc get fabricnodes
[ "$(kc get fabricnodes --no-headers | wc -l)" -eq 4 ] || fail "kubectl get fabricnodes lists $(kc get fabricnodes --no-headers | wc -l) nodes, not 4"
pass "the controller found the 4 agents through the EndpointSlice: 4 FabricNodes Reachable"

# ---- source data: random bytes in files, loaded into regions on node-a
MiB=$((1 << 20))
head -c $((256 * MiB)) /dev/urandom > "$work/node-a/kv-cache.bin"
head -c $((256 * MiB)) /dev/urandom > "$work/node-a/weights.bin"
# Smaller than the region the file-load example creates for it (256 MiB): "at least the size of the file".
head -c $((200 * MiB)) /dev/urandom > "$work/node-a/checkpoints/step-1000.bin"
for r in kv-cache weights; do
  created="$(agent node-a POST /v1/regions "{\"name\":\"$r\",\"file\":\"$r.bin\",\"mode\":\"load\"}")"
  [ "$(jq -r .name <<< "$created" 2> /dev/null)" = "$r" ] || fail "loading region $r on node-a: $created"
done
pass "source regions kv-cache and weights (256 MiB of random bytes each) loaded on node-a"

# ---- the three examples, applied together as shipped
t0=$(date +%s.%N)
r="$(kc apply -f "$root/crds/examples/point-to-point.yaml" -f "$root/crds/examples/fanout.yaml" \
  -f "$root/crds/examples/file-load.yaml" 2>&1)" || fail "kubectl apply of the examples: $r"
# Progress while they run, as a user watching them sees it.
for _ in $(seq 50); do
  kc get transferjobs > "$work/progress.txt" 2>&1
  grep -q Running "$work/progress.txt" && break
  sleep 0.1
done
cat "$work/progress.txt"
for job in point-to-point fanout file-load; do
  r="$(kc wait --for=condition=Complete "transferjob/$job" --timeout=180s 2>&1)" \
    || fail "$job not Complete: $r; $(kc get transferjob "$job" -o jsonpath='{.status}' 2>&1)"
done
elapsed=$(awk "BEGIN {print $(date +%s.%N) - $t0}")
kc get transferjobs | tee "$work/done.txt"
[ "$(grep -c 'Succeeded.*100%' "$work/done.txt")" -eq 3 ] \
  || fail "kubectl get transferjobs does not show 3 jobs Succeeded at 100%"
pass "point-to-point, fanout 1->3 and file-load Complete in $(printf '%.1f' "$elapsed") s; get shows Succeeded 100%"

for job in point-to-point fanout file-load; do
  verified="$(kc get transferjob "$job" -o jsonpath='{range .status.targets[*]}{.node}={.verified} {end}')"
  case "$verified" in *false* | "") fail "$job targets not all verified: '$verified'" ;; esac
done
pass "every target reports verified=true (crc32c)"

# ---- the bytes, from the targets' own memory: saved by their agents, compared with the source files
# save NODE REGION: the region's bytes into NODE's data dir as saved-REGION.bin.
save() {
  local saved
  saved="$(agent "$1" POST "/v1/regions/$2/save" "{\"file\":\"saved-$2.bin\"}")"
  [ -s "$work/$1/saved-$2.bin" ] || fail "saving $2 on $1: $saved"
}
save node-b kv-cache
cmp "$work/node-a/kv-cache.bin" "$work/node-b/saved-kv-cache.bin" || fail "point-to-point: node-b's bytes differ"
for n in node-b node-c node-d; do
  save "$n" weights
  cmp "$work/node-a/weights.bin" "$work/$n/saved-weights.bin" || fail "fanout: $n's bytes differ"
done
save node-b step-1000
cmp -n $((200 * MiB)) "$work/node-a/checkpoints/step-1000.bin" "$work/node-b/saved-step-1000.bin" \
  || fail "file-load: node-b's bytes differ from the file"
pass "target bytes identical to the sources (cmp): node-b kv-cache, weights on node-b/c/d, step-1000 on node-b"

for n in node-b node-c node-d; do
  grants="$(agent "$n" GET /v1/grants | jq '.items | length')"
  [ "$grants" = 0 ] || fail "$n still holds $grants grants after every job finished"
done
pass "no grant left on any target after the jobs finished"

# ---- a cut link: node-d's veth down, its FabricNode turns unreachable; up again, reachable again
ip link set "${netns_veth[node-d]}" down
for _ in $(seq 60); do [ "$(reachable node-d)" = False ] && break; sleep 0.5; done
[ "$(reachable node-d)" = False ] || fail "node-d still Reachable=$(reachable node-d) 30 s after its link was cut"
ip link set "${netns_veth[node-d]}" up
for _ in $(seq 60); do [ "$(reachable node-d)" = True ] && break; sleep 0.5; done
[ "$(reachable node-d)" = True ] || fail "node-d Reachable=$(reachable node-d) 30 s after its link came back"
pass "node-d's link cut: FabricNode Reachable=False; restored: True again"

kill -TERM "$controller"
wait "$controller"
rc=$?
[ "$rc" -eq 0 ] || fail "the controller exited $rc on SIGTERM"
pass "controller stopped cleanly on SIGTERM"
echo "cluster e2e: $passed passed, 0 failed"
