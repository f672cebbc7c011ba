#!/usr/bin/env bash
# Fault: one byte of the target's memory is flipped after it was written and before it is verified.
# The target region on node-b is memory a local process (tests/faults/memfd_holder.py) shares with the agent
# over its import socket, as a training process would; no test hook in the agent. A TransferJob moves a
# 256 MiB file on node-a into it at 64 MiB/s with crc32c. The source agent verifies a target only after it
# has sent all of it (agent/src/transfer_job.cpp: send, then verify), so a byte flipped at offset 16 MiB + 1
# while the transfer is still sending (at >= 128 MiB, in a segment finished long before) lands between the
# write and the verify. Asserted: the flip happened while the transfer was still sending; the source agent's
# transfer Succeeded, verified, with slicesResent 1; the job Succeeded verified; the target bytes equal the file.
#
#   tests/faults/byte_flip.sh [BUILD_DIR]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fault_init byte-flip "${1:-}"

size=$((256 * MiB))
setup_two_nodes --memory-cap 1GiB
mkfifo "$work/holder.in"
python3 "$fault_root/tests/faults/memfd_holder.py" "$work/node-b.sock" weights "$size" \
  < "$work/holder.in" > "$work/holder.out" 2> "$work/holder.log" &
fault_pids+=($!)
exec 3> "$work/holder.in"
wait_for 20 "the holder importing its memfd as region weights on node-b" grep -q '^imported weights' "$work/holder.out"
[ "$(api node-b GET /v1/regions/weights | jq -r .source)" = imported ] || fault_fail "region weights is not imported"
file_job weights weights.bin weights "" 'maxBytesPerSecond: 67108864'

wait_for 30 "the transfer reaching 128 MiB" transfer_past node-a $((128 * MiB))
at=$((16 * MiB + 1))
before="$(newest_transfer node-a)"
t_flip=$(now)
echo "flip $at" >&3
wait_for 5 "the holder flipping byte $at" grep -q "^flipped $at " "$work/holder.out"
after="$(newest_transfer node-a)"
# Still sending after the flip: the verify, which starts once every byte is sent, had not begun.
[ "$(jq -r .state <<< "$after")" = Running ] && [ "$(jq -r .bytesDone <<< "$after")" -lt "$size" ] \
  || fault_fail "the flip did not land while the transfer was still sending: $(jq -c '{state, bytesDone}' <<< "$after")"
id="$(jq -r .id <<< "$after")"

wait_for 60 "the job finishing" job_finished weights
t_done=$(now)
job_must_succeed weights job
t="$(api node-a GET "/v1/transfers/$id")"
[ "$(jq -r '.state' <<< "$t")" = Succeeded ] && [ "$(jq -r '.verified' <<< "$t")" = true ] \
  || fault_fail "source transfer: $(jq -c '{state, verified, reason, message}' <<< "$t")"
resent="$(jq -r '.slicesResent' <<< "$t")"
[ "$resent" = 1 ] || fault_fail "slicesResent $resent, not 1: $(jq -c . <<< "$t")"
grep -q 're-sending mismatching slices' "$work/node-a.log" || fault_fail "the source agent did not log the re-send"
job_must_be_verified weights
echo "peek $at" >&3
wait_for 5 "peeking at byte $at" grep -q "^byte $at " "$work/holder.out"
save_and_compare node-b weights "$work/node-a/weights.bin"
exec 3>&-

fault_ok "byte $at flipped ($(grep "^flipped $at" "$work/holder.out" | cut -d' ' -f3-)) at $(jq -r .bytesDone <<< "$before") bytes sent;" \
  "verify found 1 mismatching slice, slicesResent=$resent, retries=$(jq -r .retries <<< "$t"); Succeeded verified; bytes == file"
fault_ok "recovery: flip -> Succeeded $(seconds_between "$t_flip" "$t_done") s (the re-send and second verify are inside the transfer)"
