#!/usr/bin/env bash
# Fault: the target node's link is cut (its veth set down) for longer than the agents' stall timeout, then
# restored. node-a and node-b are network namespaces on a bridge; the agents run with --stall-timeout-ms
# 3000. A TransferJob moves a 256 MiB file on node-a into a new region on node-b at 64 MiB/s, verified
# crc32c, backoffLimit 6. At 25% node-b's link goes down; it comes back once the source agent has failed the
# transfer with Stalled (and no sooner than 6 s). Asserted: the source transfer Failed with reason Stalled,
# the controller retried (Retrying event naming Stalled), the job Succeeded verified, node-b's region equals
# the file, and no grant is left on node-b afterwards.
#
#   tests/faults/link_cut.sh [BUILD_DIR]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fault_init link-cut "${1:-}"
fault_up_nodes node-a node-b

stall_ms=3000
setup_two_nodes --memory-cap 1GiB --stall-timeout-ms "$stall_ms"
file_job weights weights.bin weights 268435456 'backoffLimit: 6' 'maxBytesPerSecond: 67108864'

wait_for 30 "the transfer reaching 64 MiB" transfer_past node-a $((64 * MiB))
first_id="$(newest_transfer node-a | jq -r .id)"
veth="${netns_veth[node-b]}"
t_cut=$(now)
ip link set "$veth" down || fault_fail "cannot set $veth down"
stalled() { [ "$(api node-a GET "/v1/transfers/$first_id" | jq -r .state)" = Failed ]; }
wait_for 30 "the source agent failing the transfer while the link is down" stalled
t_stalled=$(now)
first="$(api node-a GET "/v1/transfers/$first_id")"
[ "$(jq -r .reason <<< "$first")" = Stalled ] || fault_fail "the cut transfer ended $(jq -c '{state, reason, message}' <<< "$first"), not Stalled"
while awk -v a="$t_cut" -v b="$(now)" 'BEGIN { exit !(b - a < 6) }'; do sleep 0.1; done
ip link set "$veth" up || fault_fail "cannot set $veth up"
t_restored=$(now)
down_for="$(seconds_between "$t_cut" "$t_restored")"

moving_again() {
  local t
  t="$(newest_transfer node-a)"
  [ "$(jq -r .id <<< "$t")" != "$first_id" ] && [ "$(jq -r '.bytesDone // 0' <<< "$t")" -gt 0 ]
}
wait_for 60 "a retried transfer moving bytes after the link is back" moving_again
t_moving=$(now)
wait_for 90 "the job finishing after the link is back" job_finished weights
t_done=$(now)
job_must_succeed weights job
job_must_be_verified weights
job_must_have_retried weights Stalled
retries="$(job_get weights '.status.retries // 0')"
save_and_compare node-b weights "$work/node-a/weights.bin"
left="$(api node-b GET /v1/grants | jq -c '[.items[] | {id, region, expiresAt}]')"
[ "$left" = "[]" ] || fault_fail "grants left on node-b after the job Succeeded: $left"

fault_ok "link down at $(jq -r .bytesDone <<< "$first") bytes for $down_for s; source transfer Failed Stalled" \
  "$(seconds_between "$t_cut" "$t_stalled") s after the cut (stall timeout ${stall_ms} ms); retries=$retries; Succeeded verified, bytes == file"
fault_ok "recovery: link back -> bytes moving $(seconds_between "$t_restored" "$t_moving") s, -> Succeeded" \
  "$(seconds_between "$t_restored" "$t_done") s (cut -> Succeeded $(seconds_between "$t_cut" "$t_done") s)"
