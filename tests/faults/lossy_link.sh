#!/usr/bin/env bash
# Fault: a lossy, slow link. node-a and node-b are network namespaces on a bridge. A 256 MiB TransferJob
# (file on node-a -> new region on node-b, crc32c, no bandwidth cap) runs once on the clean link, then the link
# into node-b gets `tc qdisc add dev VETH root netem loss 1% delay 5ms` and a second job moves the same bytes.
# Where the kernel has no netem (CONFIG_NET_SCH_NETEM unset, no module), the loss alone is applied with what
# such kernels do have: a classic-BPF tc filter on a clsact qdisc that drops 1% of the packets at random
# (ld rand; direct action TC_ACT_SHOT), and the delay is reported as not applied. The loss is in place
# before the second job starts (a condition of the link, not an event). Asserted: both jobs Succeeded
# verified with the target bytes equal to the file; the throughput of each and the drops are reported.
#
#   tests/faults/lossy_link.sh [BUILD_DIR]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fault_init lossy-link "${1:-}"
command -v tc > /dev/null || fault_skip "no tc (iproute2) here"
fault_up_nodes node-a node-b

veth="${netns_veth[node-b]}"
# netem where the kernel has it (probed on the idle link, removed again before the clean run).
if tc qdisc add dev "$veth" root netem loss 1% delay 5ms 2> "$work/tc.err"; then
  tc qdisc del dev "$veth" root
  netem=1
else
  netem=0
  why="$(head -c 200 "$work/tc.err" | tr '\n' ' ' | sed 's/ *$//')"
  if grep -q '^# CONFIG_NET_SCH_NETEM is not set' <(zcat /proc/config.gz 2> /dev/null); then
    why+=" (kernel $(uname -r) is built without CONFIG_NET_SCH_NETEM)"
  elif [ ! -d "/lib/modules/$(uname -r)" ]; then
    why+=" (no /lib/modules/$(uname -r) to load sch_netem from)"
  fi
  # Without netem the drop is per packet as the qdisc sees it, and veths pass 64 KiB GSO super-packets: 1%
  # of those is a few dozen drops per 256 MiB, not 1% of the segments. So both runs (clean and lossy) use
  # wire-sized packets (one TCP segment each). That costs much throughput on its own (per-packet kernel
  # cost; iperf3 between two namespaces here: ~1.7 GB/s with GSO, ~45 MB/s without): compare the two runs
  # with each other only.
  for n in node-a node-b; do
    dev="$(netns_exec "$n" ip -o link show | awk -F': ' '$2 != "lo" { sub("@.*", "", $2); print $2; exit }')"
    netns_exec "$n" ip link set dev "$dev" gso_max_segs 1 || fault_fail "cannot limit GSO on $n's $dev"
  done
fi
setup_two_nodes --memory-cap 1GiB
# run_job NAME: sets rate (the job's reported throughput), took (its agent transfer's start -> end, s) and
# retries.
run_job() {
  file_job "$1" weights.bin "$1" 268435456 'backoffLimit: 6'
  wait_for 120 "job $1 finishing" job_finished "$1"
  job_must_succeed "$1" "job $1"
  job_condition "$1" Complete | grep -q 'verified crc32c' || fault_fail "job $1 not verified"
  rate="$(job_get "$1" '.status.throughput')"
  retries="$(job_get "$1" '.status.retries // 0')"
  took="$(transfer_seconds "$(newest_transfer node-a)")"
  save_and_compare node-b "$1" "$work/node-a/weights.bin"
  api node-b DELETE "/v1/regions/$1" > /dev/null
}

run_job clean
clean_rate="$rate" clean_took="$took" clean_retries="$retries"

if [ "$netem" = 1 ]; then
  tc qdisc add dev "$veth" root netem loss 1% delay 5ms || fault_fail "netem went away"
  applied="netem loss 1% delay 5ms"
else
  # 1% of 2^32: a packet is dropped when a random 32-bit number is below it.
  tc qdisc add dev "$veth" clsact 2> "$work/tc.err" \
    && tc filter add dev "$veth" egress bpf da bytecode "4,32 0 0 4294963256,53 1 0 42949673,6 0 0 2,6 0 0 4294967295" \
      2>> "$work/tc.err" \
    || fault_skip "no netem ($why) and no cls_bpf fallback: $(head -c 200 "$work/tc.err" | tr '\n' ' ')"
  applied="loss 1% of wire-sized packets (cls_bpf random drop; netem unavailable: $why; the 5 ms delay is NOT applied)"
fi
run_job lossy
lossy_rate="$rate" lossy_took="$took" lossy_retries="$retries"
slower=$(awk -v a="$clean_took" -v b="$lossy_took" 'BEGIN { print (b > a ? "slower" : "NOT slower this run") }')
drops="$(tc -s qdisc show dev "$veth" | awk '/dropped/ { gsub(",", "", $7); s += $7 } END { print s + 0 }')"
tc qdisc del dev "$veth" root 2> /dev/null
tc qdisc del dev "$veth" clsact 2> /dev/null

fault_ok "clean link: Succeeded verified, bytes == file, at $clean_rate (transfer ${clean_took} s, retries $clean_retries)"
fault_ok "$applied: Succeeded verified, bytes == file, at $lossy_rate (transfer ${lossy_took} s, retries" \
  "$lossy_retries; $slower); $drops packets dropped"
