#!/usr/bin/env bash
# Fault: a target agent's memory cap is reached. node-b runs with --memory-cap 384MiB. While a 256 MiB
# TransferJob into a new region on node-b runs (64 MiB/s, crc32c), a second job asks node-b for a 512 MiB
# region (create.bytes over the whole cap) and a REST client asks for another 256 MiB region (over what is
# left). Asserted: the second job is Failed with reason InsufficientMemory, without retrying what can never
# fit; the REST request gets 422 with a JSON error (code ResourceExhausted) and changes nothing; node-b
# answers /healthz throughout; the first job Succeeded verified with its bytes equal to the file; and once it
# is done a new transfer into node-b still works.
#
#   tests/faults/memory_cap.sh [BUILD_DIR]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fault_init memory-cap "${1:-}"

agent_start node-a --memory-cap 1GiB
agent_start node-b --memory-cap 384MiB
random_file "$work/node-a/weights.bin" 256
controller_start

file_job weights weights.bin weights $((256 * MiB)) 'maxBytesPerSecond: 67108864'
wait_for 30 "the first transfer reaching 64 MiB" transfer_past node-a $((64 * MiB))

# Over the whole cap: can never fit.
t_apply=$(now)
file_job too-big weights.bin too-big $((512 * MiB)) 'maxBytesPerSecond: 67108864'
wait_for 30 "the over-cap job finishing" job_finished too-big
t_failed=$(now)
[ "$(job_phase too-big)" = Failed ] || fault_fail "the over-cap job is $(job_phase too-big)"
failed="$(job_condition too-big Failed)"
grep -q '^True InsufficientMemory: ' <<< "$failed" || fault_fail "Failed condition: $failed"
retries="$(job_get too-big '.status.retries // 0')"

# Over what is left (256 of 384 MiB in use): the REST API's answer.
code="$(api_code node-b POST /v1/regions "{\"name\":\"more\",\"bytes\":$((256 * MiB))}")"
body="$(api node-b POST /v1/regions "{\"name\":\"more\",\"bytes\":$((256 * MiB))}")"
[ "$code" = 422 ] || fault_fail "a region over the cap: HTTP $code $body"
[ "$(jq -r .error.code <<< "$body")" = ResourceExhausted ] || fault_fail "error body: $body"
[ "$(api_code node-b GET /v1/regions/more)" = 404 ] || fault_fail "the refused region exists"
agent_healthy node-b || fault_fail "node-b does not answer /healthz after the refusals"

wait_for 30 "the first job finishing" job_finished weights
job_must_succeed weights "the first job"
job_condition weights Complete | grep -q 'verified crc32c' || fault_fail "first job not verified"
save_and_compare node-b weights "$work/node-a/weights.bin"
used="$(api node-b GET /v1/node | jq -r '.memory.used')"
[ "$used" = $((256 * MiB)) ] || fault_fail "node-b memory.used $used, not the one 256 MiB region"

# Another transfer into node-b still works (into what is left of the cap: 128 MiB).
random_file "$work/node-a/small.bin" 64
file_job after small.bin after 67108864
wait_for 30 "the job after the refusals finishing" job_finished after
job_must_succeed after "the job after the refusals"
save_and_compare node-b after "$work/node-a/small.bin"
agent_healthy node-b || fault_fail "node-b unhealthy at the end"

fault_ok "create.bytes 512 MiB > cap 384 MiB: Failed in $(seconds_between "$t_apply" "$t_failed") s after apply, retries=$retries: $failed"
fault_ok "POST /v1/regions 256 MiB with 256 of 384 MiB used: 422 $(jq -r .error.code <<< "$body"): $(jq -r .error.message <<< "$body")"
fault_ok "node-b healthy; the running 256 MiB job Succeeded verified (bytes == file); a later 64 MiB job Succeeded"
