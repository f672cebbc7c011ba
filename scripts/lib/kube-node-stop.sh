# shellcheck shell=bash
# shellcheck disable=SC2154 # $dir, $sock, $bridge, $net_name, $cgroup_root, $CRICTL and log, ms_since, crictl
#                             are scripts/kube-node.sh's
# Sourced by scripts/kube-node.sh: how its node stops, and the sweep that leaves nothing of it on the machine
# whatever state it was in (stopped cleanly, half started, or its containerd killed).
#
#   stop NAME...    SIGTERM the node's processes named so, together; SIGKILL after 30 s
#   sweep           kill, unmount and remove what is left of the node (also what lies outside DIR)
#   stop_all        the whole stop: daemons, pods (crictl rmp), containerd, sweep

# stop NAME...: SIGTERM the processes in DIR/NAME.pid (each only while it still runs NAME) together, wait up
# to 30 s for them (each takes 1-2 s to exit), SIGKILL what is left.
stop() {
  local name pid pids=() names=()
  for name in "$@"; do
    [ -f "$dir/$name.pid" ] || continue
    pid="$(cat "$dir/$name.pid")"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
       && { tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "$name"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
      names+=("$name")
    fi
    rm -f "$dir/$name.pid"
  done
  local i left
  for _ in $(seq 300); do
    left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    [ "$left" -eq 1 ] || break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      log "${names[$i]} (pid ${pids[$i]}) did not exit in 30 s: SIGKILL"
      kill -KILL "${pids[$i]}" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
    fi
    # A child of this shell (stop after a failed start) is reaped here; otherwise wait is a no-op.
    wait "${pids[$i]}" 2>/dev/null || true
  done
}

# cgroup_dirs: this node's cgroup root in every cgroup v1 hierarchy.
cgroup_dirs() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [ "$h" = /sys/fs/cgroup/unified/ ] || echo "${h%/}$cgroup_root"
  done
}

# shims: pids of the containerd shims this node's containerd started (they name its socket).
shims() {
  local p
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null | grep -q -- "-address $sock "; then echo "${p#/proc/}"; fi
  done
}

sweep() {
  local pids m ns
  # Containers' processes are in the node's cgroups; the shims name the node's socket.
  for _ in 1 2 3; do
    pids="$( { for d in $(cgroup_dirs); do find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done; shims; } \
             | sort -u)"
    [ -n "$pids" ] || break
    log "killing what is left of the node's processes: $(printf '%s' "$pids" | tr '\n' ' ')"
    # shellcheck disable=SC2086 # one pid a word
    kill -KILL $pids 2>/dev/null || true
    sleep 0.3
  done
  # Mounts beneath DIR (overlay rootfs, sandbox /dev/shm, the kubelet's volumes), deepest first.
  awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
  done
  # Pods' network namespaces left by a containerd that died: those whose eth0 sits on this node's network.
  if [ -f "$dir/env" ]; then
    local subnet
    subnet="$(sed -n 's/^POD_SUBNET_PREFIX=//p' "$dir/env")"
    for ns in /run/netns/cni-*; do
      ns="${ns#/run/netns/}"
      if [ -n "$subnet" ] && ip -n "$ns" -4 -o addr show 2>/dev/null | grep -q " inet $subnet"; then
        ip netns delete "$ns" 2>/dev/null || log "cannot delete network namespace $ns"
      fi
    done
  fi
  if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge" || log "cannot delete bridge $bridge"; fi
  # What a containerd or shim killed mid-way leaves outside DIR, found by the node's sandbox ids: libcni's
  # result cache (<network>-<id>-<if>, the loopback's too), and the shims' sockets, which containerd 1.6 names
  # /run/containerd/s/<sha256 of "<its socket>/<namespace>/<id>"> (crictl rmp leaves neither).
  local id_dir="$dir/containerd/root/io.containerd.grpc.v1.cri/sandboxes" sid
  for sid in "$id_dir"/*; do
    sid="${sid##*/}"
    rm -f /var/lib/cni/results/*-"$sid"-* \
          "/run/containerd/s/$(printf '%s' "$sock/k8s.io/$sid" | sha256sum | cut -d' ' -f1)" 2>/dev/null || true
  done
  rm -f /var/lib/cni/results/"$net_name"-* 2>/dev/null || true
  # The kubelet's device-plugin socket (a fixed path, whatever its root dir) once no kubelet listens on it.
  local dp=/var/lib/kubelet/device-plugins/kubelet.sock
  if [ -S "$dp" ] && [ -z "$(ss -Hxl "src $dp" 2>/dev/null)" ]; then rm -f "$dp"; fi
  # Cgroups, children first (an empty cgroup is removed with rmdir); runc mirrors them in the cgroup2
  # hierarchy of a hybrid host too.
  for d in $(cgroup_dirs) /sys/fs/cgroup/unified"$cgroup_root"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    [ ! -d "$d" ] || log "cannot remove cgroup $d"
  done
}

stop_all() {
  local t
  t=$(date +%s%N)
  # Without the kubelet nothing restarts a pod removed next.
  stop kube-scheduler kube-controller-manager kubelet
  if [ -f "$dir/containerd.pid" ] && kill -0 "$(cat "$dir/containerd.pid")" 2>/dev/null && [ -S "$sock" ]; then
    # Stops each pod's containers and its sandbox (the CNI plugins release its address and veth) and
    # removes them: the way a node's pods end, not a kill. Without crictl the sweep below does it.
    if [ -x "${CRICTL:-}" ]; then
      crictl rmp --all --force >/dev/null 2>"$dir/crictl-rmp.err" || log "crictl rmp: $(tail -n1 "$dir/crictl-rmp.err")"
    fi
  fi
  stop containerd
  sweep
  log "stopped in $(ms_since "$t") ms"
}
