#!/usr/bin/env bash
# Fault: the source agent is SIGKILLed mid-transfer and restarted (as a DaemonSet pod restarts on its node).
# A TransferJob whose source is a file (source.file) moves 256 MiB from node-a into a new region on node-b at
# 64 MiB/s, verified crc32c. At 25% node-a is killed, then started again on the same port 1 s later. The
# restarted agent has lost every region and transfer: the controller finds the transfer gone (TransferLost),
# retries after its backoff, reloads the file and completes. Asserted: the job Succeeded with 1 retry, its
# condition and event say why, and node-b's region equals the file byte for byte.
# Then the same kill with the controller stopped (SIGSTOP) meanwhile, and another client running transfers
# on the restarted agent until it hands out the id the job had recorded (if ids repeat across restarts):
# the job must still see its own transfer gone, retry and end with the right bytes.
#
#   tests/faults/source_killed.sh [BUILD_DIR]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fault_init source-killed "${1:-}"

setup_two_nodes --memory-cap 1GiB
file_job weights weights.bin weights 268435456 'backoffLimit: 3' 'maxBytesPerSecond: 67108864'

wait_for 30 "the transfer reaching 64 MiB" transfer_past node-a $((64 * MiB))
before="$(newest_transfer node-a)"
t_fault=$(now)
agent_kill node-a
sleep 1
agent_start node-a
t_restarted=$(now)
# The restarted agent's first transfer is the retry (its transfer list starts empty).
retry_moving() {
  local t
  t="$(newest_transfer node-a)"
  [ "$(jq -r '.bytesDone // 0' <<< "$t")" -gt 0 ]
}
wait_for 30 "the retried transfer moving bytes on the restarted node-a" retry_moving
t_moving=$(now)
wait_for 60 "the job finishing after the restart" job_finished weights
t_done=$(now)
job_must_succeed weights job
retries="$(job_get weights '.status.retries // 0')"
[ "$retries" -ge 1 ] || fault_fail "job Succeeded with retries=$retries: the kill was not seen"
job_must_be_verified weights
job_must_have_retried weights TransferLost
save_and_compare node-b weights "$work/node-a/weights.bin"
fault_ok "killed at $(jq -r '.bytesDone' <<< "$before") of 268435456 bytes; Retrying (TransferLost)," \
  "retries=$retries, Succeeded verified, target bytes == source file"
fault_ok "recovery: kill -> agent back $(seconds_between "$t_fault" "$t_restarted") s (1 s down)," \
  "-> bytes moving again $(seconds_between "$t_fault" "$t_moving") s, -> Succeeded $(seconds_between "$t_fault" "$t_done") s"

# ---- The same kill while the controller is away (stopped: a controller pod being rescheduled). Meanwhile
# another client starts a transfer on the restarted node-a. When the controller is back, the transfer id it
# recorded must not lead it to that other transfer: the job must see its own transfer gone and retry.
file_job second weights.bin second 268435456 'backoffLimit: 3' 'maxBytesPerSecond: 67108864'
wait_for 30 "the second job's transfer reaching 64 MiB" transfer_past node-a $((64 * MiB))
recorded="$(newest_transfer node-a | jq -r .id)"
kill -STOP "$controller_pid"
t_fault=$(now)
agent_kill node-a
agent_start node-a
# Another user's small transfer on the restarted agent (node-a -> node-b), verified.
head -c $((4 * MiB)) "$work/node-a/weights.bin" > "$work/node-a/other.bin"
api node-a POST /v1/regions '{"name":"other","file":"other.bin","mode":"load"}' > /dev/null
api node-b POST /v1/regions "{\"name\":\"other\",\"bytes\":$((4 * MiB))}" > /dev/null
grant="$(api node-b POST /v1/regions/other/grants '{"access":"write","ttlSeconds":60}')"
body="$(jq -c --arg url "${agent_url[node-b]}" '{source: {region: "other"}, verify: "crc32c",
  targets: [{grant: .key, url: $url, region: "other"}]}' <<< "$grant")"
# As many as it takes the restarted agent to hand out the id the job recorded (agents that number transfers
# from 1 at every start do), at most 4.
other_done() { [ "$(api node-a GET "/v1/transfers/$other" | jq -r .state)" = Succeeded ]; }
for _ in 1 2 3 4; do
  other="$(api node-a POST /v1/transfers "$body" | jq -r .id)"
  wait_for 20 "the other client's transfer $other finishing" other_done
  [ "$other" != "$recorded" ] || break
done
kill -CONT "$controller_pid"
t_back=$(now)
wait_for 60 "the second job finishing" job_finished second
t_done=$(now)
job_must_succeed second "second job"
retries="$(job_get second '.status.retries // 0')"
if [ "$retries" -lt 1 ]; then
  api node-b POST /v1/regions/second/save '{"file":"second.bin"}' > /dev/null
  fault_fail "the second job Succeeded without a retry: it took transfer $other (another client's; the job" \
    "had recorded $recorded before the restart) for its own; node-b's bytes vs the file:" \
    "$(cmp "$work/node-a/weights.bin" "$work/node-b/second.bin" 2>&1 | head -1)"
fi
save_and_compare node-b second "$work/node-a/weights.bin"
fault_ok "killed while the controller was stopped; another client's transfer on the restarted agent got id $other" \
  "(the job had recorded $recorded); the job retried (TransferLost) and Succeeded verified, bytes == file"
fault_ok "recovery: controller back -> Succeeded $(seconds_between "$t_back" "$t_done") s"
