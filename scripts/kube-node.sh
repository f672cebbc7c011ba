#!/usr/bin/env bash
# A real Kubernetes node for end-to-end tests, joined to the apiserver of scripts/kube-env.sh: a private
# containerd, a kubelet v1.34 registered with its own client certificate, and kube-scheduler and
# kube-controller-manager, so Pods, DaemonSets and Deployments really run. Everything is under DIR; what cannot
# be (cgroups, the CNI bridge, pods' network namespaces) is named after DIR and removed by stop.
#
#   scripts/kube-node.sh start DIR KUBE_DIR [NAME]   start the node NAME (default conduit-node) against the
#                                                    apiserver of KUBE_DIR (started with CONDUIT_KUBE_NODE=1);
#                                                    returns once the node is Ready. Writes DIR/env (NODE_NAME,
#                                                    NODE_IP, CONTAINERD_ADDRESS, BRIDGE, CGROUP_ROOT, timings
#                                                    in ms)
#   scripts/kube-node.sh import DIR ARCHIVE...       import image archives (docker or OCI) into the node's
#                                                    containerd, where pods find them (imagePullPolicy: Never)
#   scripts/kube-node.sh stop DIR                    remove every pod (crictl rmp), stop the processes, then
#                                                    sweep: no process, mount, network namespace, bridge or
#                                                    cgroup of this node is left
#
# Needs root, containerd, runc and the CNI plugins (scripts/install-deps.sh --node), and the binaries of
# scripts/kube-tools.sh --node ($KUBELET, $KUBE_SCHEDULER, $KUBE_CONTROLLER_MANAGER, $CRICTL, $KUBECTL
# override them). The pod sandbox image is scripts/kube-images.sh's (no registry is reachable).
# Logs: DIR/{containerd,kubelet,kube-scheduler,kube-controller-manager}.log. A start that fails half way
# stops what it started, and says which process failed with the last lines of its log.
#
# This machine's kind: cgroup v1 (kubelet 1.34 still runs on it with failCgroupV1: false), no systemd (the
# cgroupfs driver, for runc and the kubelet alike), containerd 1.6 (CRI v1; it cannot tell the kubelet its
# cgroup driver, so the KubeletConfiguration says it), root without CAP_SYS_RESOURCE (containerd's
# restrict_oom_score_adj).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "kube-node: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { die "usage: $0 start DIR KUBE_DIR [NAME] | import DIR ARCHIVE... | stop DIR"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

[ $# -ge 2 ] || usage
cmd="$1"
case "$cmd" in
  start) [ $# -ge 3 ] && [ $# -le 4 ] || usage; mkdir -p "$2" ;;
  import) [ $# -ge 3 ] || usage; [ -d "$2" ] || die "no node in $2" ;;
  stop) [ $# -eq 2 ] || usage; [ -d "$2" ] || exit 0 ;;
  *) usage ;;
esac
dir="$(cd "$2" && pwd)"
[ "$(id -u)" -eq 0 ] || die "needs root (containerd, cgroups, network namespaces)"

# What is outside DIR is named after it, so two nodes on one machine (two test runs) never share anything:
# the cgroup root, the CNI network and bridge.
id="$(printf '%s' "$dir" | sha256sum | cut -c1-8)"
cgroup_root="/conduit-node-$id"
net_name="conduit-$id"
bridge="cnb$id"
sock="$dir/containerd/containerd.sock"
# A unix socket's path has at most 107 bytes (containerd also serves $sock.ttrpc).
[ "${#sock}" -le 100 ] || die "DIR is too long for containerd's sockets beneath it ($sock): use a shorter one"

# ---- tools (stop goes on without them: its sweep needs none)
tools() {
  local paths
  paths="$("$here/kube-tools.sh" --node --print)" || [ "$cmd" = stop ] \
    || die "kube tools are not built: run scripts/kube-tools.sh --node"
  eval "$(printf '%s\n' "$paths" | grep -E '^(KUBELET|KUBE_SCHEDULER|KUBE_CONTROLLER_MANAGER|CRICTL|KUBECTL)=' \
            | sed 's/^/tools_/')"
  KUBELET="${KUBELET:-$tools_KUBELET}"
  KUBE_SCHEDULER="${KUBE_SCHEDULER:-$tools_KUBE_SCHEDULER}"
  KUBE_CONTROLLER_MANAGER="${KUBE_CONTROLLER_MANAGER:-$tools_KUBE_CONTROLLER_MANAGER}"
  CRICTL="${CRICTL:-$tools_CRICTL}"
  KUBECTL="${KUBECTL:-$tools_KUBECTL}"
}
# (crictl reads a config file too: DIR/crictl.yaml says where the runtime is, so it looks nowhere else.)
crictl() {
  "$CRICTL" --config "$dir/crictl.yaml" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" \
    --timeout 20s "$@"
}
ctr() { command ctr --address "$sock" --namespace k8s.io "$@"; }

# ---- stop ----------------------------------------------------------------------------------------------------
# shellcheck source=lib/kube-node-stop.sh
. "$here/lib/kube-node-stop.sh"

if [ "$cmd" = stop ]; then
  tools
  stop_all
  exit 0
fi

# ---- import --------------------------------------------------------------------------------------------------
if [ "$cmd" = import ]; then
  [ -S "$sock" ] || die "no containerd runs in $dir"
  shift 2
  for a in "$@"; do
    [ -s "$a" ] || die "no image archive $a"
    t=$(date +%s%N)
    out="$(ctr images import "$a" 2>&1)" || die "ctr images import $a: $out"
    log "imported $(basename "$a") in $(ms_since "$t") ms"
  done
  exit 0
fi

# ---- start ---------------------------------------------------------------------------------------------------
kube_dir="$(cd "$3" 2>/dev/null && pwd)" || die "no kube-env directory $3"
name="${4:-conduit-node}"
for f in kubelet containerd kube-scheduler kube-controller-manager; do
  if [ -f "$dir/$f.pid" ] && kill -0 "$(cat "$dir/$f.pid")" 2>/dev/null; then
    die "$f already runs from $dir (pid $(cat "$dir/$f.pid")): run '$0 stop $dir' first"
  fi
done
tools
for b in "$KUBELET" "$KUBE_SCHEDULER" "$KUBE_CONTROLLER_MANAGER" "$CRICTL" "$KUBECTL"; do
  [ -x "$b" ] || die "no $b: run scripts/kube-tools.sh --node"
done
for b in containerd runc ctr openssl; do
  command -v "$b" >/dev/null || die "$b is missing: run scripts/install-deps.sh --node"
done
for p in bridge host-local loopback; do
  [ -x "/usr/lib/cni/$p" ] || die "no CNI plugin /usr/lib/cni/$p: apt-get install containernetworking-plugins"
done
[ -r /dev/kmsg ] || die "/dev/kmsg cannot be read: the kubelet refuses to start without it"
for s in cpu cpuacct cpuset memory pids; do
  grep -qw "$s" /proc/self/cgroup || die "the $s cgroup controller is not mounted: the kubelet needs it"
done
for f in env client-ca.crt client-ca.key kubeconfig sa.key certs/apiserver.crt; do
  [ -s "$kube_dir/$f" ] || die "no $kube_dir/$f: start the apiserver with scripts/kube-env.sh first"
done
api_url="$(sed -n 's/^KUBE_APISERVER_URL=//p' "$kube_dir/env")"
case "$api_url" in
  https://127.*) log "warning: the apiserver listens on loopback only: pods will not reach it (start it with" \
                     "CONDUIT_KUBE_NODE=1 scripts/kube-env.sh start)" ;;
esac
kc() { "$KUBECTL" --kubeconfig "$kube_dir/kubeconfig" --request-timeout=20s "$@"; }

started=0
on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ "$started" -eq 1 ]; then
    log "start failed: stopping what it started"
    stop_all
  fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM HUP
started=1
t_start=$(date +%s%N)

alive() { kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }
died() { die "$1 exited during start; last lines of $dir/$1.log:"$'\n'"$(tail -n 15 "$dir/$1.log")"; }

# free_port: a free TCP port (racy by nature: a process that loses it fails its start, which says so).
free_port() {
  local p
  for _ in $(seq 200); do
    p=$(( 20000 + RANDOM % 40000 ))
    if [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then echo "$p"; return 0; fi
  done
  die "no free port found"
}

# shellcheck source=lib/node-ip.sh
. "$here/lib/node-ip.sh"
node_ip="$(node_ip)" || die "no IPv4 address for the node (no default route, no global address)"

# A /24 for pods that no route of this machine covers, picked from 10.200-249.x by DIR's id.
pod_subnet=""
for i in $(seq 0 49); do
  a=$(( 200 + (0x${id:0:2} + i) % 50 )) b=$(( 0x${id:2:2} ))
  if ! ip -4 route | grep -q "^10\.$a\.$b\."; then pod_subnet="10.$a.$b.0/24"; pod_prefix="10.$a.$b."; break; fi
done
[ -n "$pod_subnet" ] || die "no free 10.200-249.x.0/24 for pods"
# What a stop needs to find this node's pods' network namespaces, should this start fail half way.
printf 'POD_SUBNET=%s\nPOD_SUBNET_PREFIX=%s\n' "$pod_subnet" "$pod_prefix" > "$dir/env"

mkdir -p "$dir/pki" "$dir/containerd" "$dir/cni/net.d" "$dir/cni/ipam" "$dir/kubelet" "$dir/pod-logs"
chmod 700 "$dir/pki"

# ---- credentials: the kubelet's client certificate (CN system:node:NAME, O system:nodes), from the
# apiserver's client CA; the Node authorizer and NodeRestriction then hold it to this node.
(umask 077
 openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
   -subj "/O=system:nodes/CN=system:node:$name" -keyout "$dir/pki/kubelet-client.key" 2>/dev/null \
 | openssl x509 -req -CA "$kube_dir/client-ca.crt" -CAkey "$kube_dir/client-ca.key" -CAcreateserial \
     -CAserial "$dir/pki/client-ca.srl" -days 30 -out "$dir/pki/kubelet-client.crt" 2>/dev/null) \
  || die "cannot issue the kubelet's client certificate"
cat > "$dir/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: $api_url
    certificate-authority: $kube_dir/certs/apiserver.crt
users:
- name: system:node:$name
  user:
    client-certificate: $dir/pki/kubelet-client.crt
    client-key: $dir/pki/kubelet-client.key
contexts:
- name: e2e
  context: {cluster: e2e, user: "system:node:$name"}
current-context: e2e
EOF
chmod 600 "$dir/kubelet.kubeconfig"

# ---- the sandbox image
t=$(date +%s%N)
images="$("$here/kube-images.sh" --pause)" || die "cannot build the pause image (scripts/kube-images.sh --pause)"
pause_image="$(printf '%s\n' "$images" | sed -n 's/^PAUSE_IMAGE=//p')"
pause_archive="$(printf '%s\n' "$images" | sed -n 's/^PAUSE_ARCHIVE=//p')"
pause_ms=$(ms_since "$t")

# ---- cgroups: the kubelet's cgroup root, in every v1 hierarchy (it must exist before the kubelet starts;
# cpuset needs its cpus and mems before a process may join).
for d in $(cgroup_dirs); do
  mkdir -p "$d"
  case "$d" in
    /sys/fs/cgroup/cpuset/*)
      cat /sys/fs/cgroup/cpuset/cpuset.cpus > "$d/cpuset.cpus"
      cat /sys/fs/cgroup/cpuset/cpuset.mems > "$d/cpuset.mems" ;;
  esac
done

# ---- CNI: one bridge for this node's pods, host-local addresses (their state under DIR), no NAT (the pods
# reach the host, and through it only what the host routes).
cat > "$dir/cni/net.d/10-conduit.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$net_name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$pod_subnet"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$dir/cni/ipam"
      }
    }
  ]
}
EOF

# ---- containerd: root, state, sockets and runc's state under DIR; the CRI plugin with overlayfs, runc
# without systemd cgroups, CNI from Debian's plugins, the local sandbox image.
cat > "$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
# Snapshotters and tracing this node does not use (they would only log that they cannot start).
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Lowering a process's oom_score_adj takes CAP_SYS_RESOURCE, which this machine's root may lack (the test
  # machines run without it): the kubelet's -998 for the sandbox then fails runc's create ("can't get final
  # child's PID from pipe: EOF", after "failed to update /proc/self/oom_score_adj: Permission denied").
  # Restricted, containerd clamps the score to its own instead (what rootless nodes do).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$dir/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
EOF

printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$sock" "$sock" > "$dir/crictl.yaml"
t=$(date +%s%N)
containerd --config "$dir/containerd/config.toml" < /dev/null > "$dir/containerd.log" 2>&1 &
echo $! > "$dir/containerd.pid"
for _ in $(seq 300); do
  alive containerd || died containerd
  if [ -S "$sock" ] && ctr version >/dev/null 2>&1; then break; fi
  sleep 0.1
done
ctr version >/dev/null 2>&1 || die "containerd does not answer on $sock after 30 s (log: $dir/containerd.log)"
containerd_ms=$(ms_since "$t")
t=$(date +%s%N)
out="$(ctr images import "$pause_archive" 2>&1)" || die "ctr images import $pause_archive: $out"
import_ms=$(ms_since "$t")

# ---- kubelet
kubelet_port="$(free_port)"
healthz_port="$(free_port)"
cat > "$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
# Only the apiserver calls the kubelet here (logs, exec), with a certificate from the client CA.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $kube_dir/client-ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
podLogsDir: $dir/pod-logs
maxPods: 32
serializeImagePulls: false
# This machine's disk is shared and may be fuller than a node's should be: only a nearly full one evicts,
# and image GC never removes the imported images (no registry could bring them back).
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
rotateCertificates: false
serverTLSBootstrap: false
EOF

t_kubelet=$(date +%s%N)
"$KUBELET" --config="$dir/kubelet/config.yaml" --kubeconfig="$dir/kubelet.kubeconfig" \
  --root-dir="$dir/kubelet" --cert-dir="$dir/kubelet/pki" \
  --hostname-override="$name" --node-ip="$node_ip" --v=2 \
  < /dev/null > "$dir/kubelet.log" 2>&1 &
echo $! > "$dir/kubelet.pid"

# ---- kube-scheduler and kube-controller-manager: the apiserver's admin credential, one instance each (no
# leader election), no serving port (nothing scrapes them here).
"$KUBE_SCHEDULER" --kubeconfig="$kube_dir/kubeconfig" --leader-elect=false --secure-port=0 \
  < /dev/null > "$dir/kube-scheduler.log" 2>&1 &
echo $! > "$dir/kube-scheduler.pid"
"$KUBE_CONTROLLER_MANAGER" --kubeconfig="$kube_dir/kubeconfig" --leader-elect=false --secure-port=0 \
  --use-service-account-credentials=false \
  --root-ca-file="$kube_dir/certs/apiserver.crt" --service-account-private-key-file="$kube_dir/sa.key" \
  < /dev/null > "$dir/kube-controller-manager.log" 2>&1 &
echo $! > "$dir/kube-controller-manager.pid"

# Ready as this kubelet reports it: a node object kept from an earlier start says Ready until it goes stale,
# so the condition counts only with a heartbeat from after this start (whole seconds, as the API keeps them).
kubelet_epoch=$(( t_kubelet / 1000000000 ))
ready=""
for _ in $(seq 240); do
  for p in kubelet kube-scheduler kube-controller-manager containerd; do alive "$p" || died "$p"; done
  cond="$(kc get node "$name" 2>/dev/null -o \
          jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.lastHeartbeatTime}{end}' || true)"
  ready="${cond%% *}"
  if [ "$ready" = True ] && [ "$(date -d "${cond#* }" +%s 2>/dev/null || echo 0)" -ge "$kubelet_epoch" ]; then break; fi
  ready="${ready:-none}, no heartbeat yet"
  sleep 0.5
done
[ "$ready" = True ] || die "node $name not Ready after 120 s (Ready=$ready); kubelet log: $dir/kubelet.log"
kubelet_ready_ms=$(ms_since "$t_kubelet")

cat > "$dir/env" <<EOF
NODE_NAME=$name
NODE_IP=$node_ip
POD_SUBNET=$pod_subnet
POD_SUBNET_PREFIX=$pod_prefix
BRIDGE=$bridge
CNI_NETWORK=$net_name
CGROUP_ROOT=$cgroup_root
KUBELET_ROOT=$dir/kubelet
CONTAINERD_ADDRESS=$sock
KUBELET_PORT=$kubelet_port
PAUSE_IMAGE=$pause_image
PAUSE_IMAGE_MS=$pause_ms
CONTAINERD_START_MS=$containerd_ms
PAUSE_IMPORT_MS=$import_ms
KUBELET_READY_MS=$kubelet_ready_ms
NODE_START_MS=$(ms_since "$t_start")
EOF
started=0
log "node $name Ready in $(ms_since "$t_start") ms (containerd $containerd_ms ms, pause image $pause_ms ms +" \
    "import $import_ms ms, kubelet to Ready $kubelet_ready_ms ms); logs in $dir"
