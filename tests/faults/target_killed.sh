#!/usr/bin/env bash
# Fault: a target agent is SIGKILLed mid-transfer and never comes back (its node is gone).
# A Fanout TransferJob moves a 256 MiB region on node-a into new regions on node-b and node-c at 64 MiB/s per
# target, verified crc32c, activeDeadlineSeconds 60. The agent writes the targets one after another; at 25%
# of node-b's bytes node-b is killed. Asserted: the job ends Failed within the deadline, with the reason
# naming the unreachable peer; the live target node-c holds no grant and no region the job created; the
# source node-a runs no transfer and its region has no users left (no registration leaked: it can be
# deleted at once); every agent still alive answers /healthz.
#
#   tests/faults/target_killed.sh [BUILD_DIR]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fault_init target-killed "${1:-}"

for n in node-a node-b node-c; do agent_start "$n" --memory-cap 1GiB; done
random_file "$work/node-a/weights.bin" 256
r="$(api node-a POST /v1/regions '{"name":"weights","file":"weights.bin","mode":"load"}')"
[ "$(jq -r .name <<< "$r")" = weights ] || fault_fail "loading the source region: $r"
controller_start
job_apply weights << 'YAML'
apiVersion: conduit.dev/v1alpha1
kind: TransferJob
metadata:
  name: weights
spec:
  source:
    node: node-a
    region: weights
  targets:
    - node: node-b
      region: weights
      create:
        bytes: 268435456
    - node: node-c
      region: weights
      create:
        bytes: 268435456
  strategy: Fanout
  transport:
    type: tcp
  verify: crc32c
  activeDeadlineSeconds: 60
  maxBytesPerSecond: 67108864
YAML

wait_for 30 "the transfer reaching 64 MiB" transfer_past node-a $((64 * MiB))
grants_c="$(api node-c GET /v1/grants | jq '.items | length')"
[ "$grants_c" -ge 1 ] || fault_fail "node-c holds no grant while the job runs"
t_fault=$(now)
agent_kill node-b
first_failure() {
  local t
  t="$(newest_transfer node-a)"
  case "$(jq -r '.state // ""' <<< "$t")" in Failed | Cancelled) return 0 ;; *) return 1 ;; esac
}
wait_for 60 "the source agent noticing the dead target" first_failure
t_noticed=$(now)
first="$(newest_transfer node-a)"
wait_for 70 "the job finishing" job_finished weights
t_done=$(now)
phase="$(job_phase weights)"
failed="$(job_condition weights Failed)"
[ "$phase" = Failed ] || fault_fail "job $phase, not Failed"
grep -q 'PeerUnreachable' <<< "$failed" || fault_fail "the Failed condition does not name PeerUnreachable: $failed"
took="$(seconds_between "$t_fault" "$t_done")"
awk -v t="$took" 'BEGIN { exit !(t < 60) }' || fault_fail "Failed after $took s, beyond activeDeadlineSeconds 60"

# What is left on the live nodes.
left_grants="$(api node-c GET /v1/grants | jq -c '[.items[] | {id, region}]')"
[ "$left_grants" = "[]" ] || fault_fail "grants left on node-c: $left_grants"
left_a="$(api node-a GET /v1/grants | jq -c '[.items[] | {id, region}]')"
[ "$left_a" = "[]" ] || fault_fail "grants left on node-a: $left_a"
region_c="$(api_code node-c GET /v1/regions/weights)"
[ "$region_c" = 404 ] || fault_fail "the region the job created on node-c is still there (GET: $region_c)"
users="$(api node-a GET /v1/regions/weights | jq -r '.users')"
[ "$users" = 0 ] || fault_fail "the source region on node-a still has $users users"
active="$(metric node-a conduit_agent_active_transfers)"
[ "$active" = 0 ] || fault_fail "node-a reports $active active transfers"
for n in node-a node-c; do
  agent_healthy "$n" || fault_fail "$n unhealthy"
done
del="$(api_code node-a DELETE /v1/regions/weights)"
[ "$del" = 204 ] || fault_fail "deleting the source region on node-a: HTTP $del (a registration leaked?)"

fault_ok "node-b killed at $(jq -r .bytesDone <<< "$first") bytes; source transfer $(jq -r '.state + " " + .reason' <<< "$first")" \
  "after $(seconds_between "$t_fault" "$t_noticed") s; job Failed: $failed"
fault_ok "node-c: 0 grants, created region deleted; node-a: 0 grants, region users 0, 0 active transfers, region deletable"
fault_ok "recovery: kill -> Failed $took s (activeDeadlineSeconds 60)"
