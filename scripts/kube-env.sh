#!/usr/bin/env bash
# A real etcd + kube-apiserver on 127.0.0.1 for end-to-end tests, started the way controller-runtime's
# envtest starts them (no kubelet, scheduler or controller-manager).
#
#   scripts/kube-env.sh start DIR   start both; data, certs, logs and pids in DIR; writes DIR/kubeconfig
#                                   (server, the apiserver's CA, a static token for user "conduit-admin" in
#                                   group system:masters) and prints `export KUBECONFIG=DIR/kubeconfig`
#   scripts/kube-env.sh stop DIR    stop both (pids in DIR) and wait for them to exit
#
# Binaries: $KUBE_APISERVER and $ETCD when set, else those scripts/kube-tools.sh built (run it first).
# Logs: DIR/etcd.log, DIR/kube-apiserver.log. Ports (free ones, picked at start): DIR/env.
# A start on a DIR that ran before (stop, then start) keeps its etcd data and comes back on the ports DIR/env
# names while they are free, so DIR/kubeconfig and the clients holding it stay valid across the restart.
# A start that fails half way stops what it started. Only 127.0.0.1 is listened on (with CONDUIT_KUBE_NODE=1
# the node address instead: below).
#
# Client certificates: DIR/client-ca.{crt,key} is the apiserver's --client-ca-file, so a certificate it signs
# authenticates (a node's kubelet: CN system:node:<name>, O system:nodes, which scripts/kube-node.sh issues;
# the Node authorizer and NodeRestriction admission hold it to its own node). The apiserver reaches kubelets
# (logs, exec) with DIR/kubelet-client.{crt,key} (O system:masters), signed by the same CA.
# CONDUIT_KUBE_NODE=1: for a real node (scripts/kube-node.sh): the ServiceAccount admission plugin stays on, so
# pods get their ServiceAccount's token mounted (kube-controller-manager then must run: it makes the
# namespaces' default ServiceAccounts, without which pods are refused); and the apiserver listens on the node's
# address (scripts/lib/node-ip.sh) instead of 127.0.0.1, so that pods, in network namespaces of their own,
# reach it (its serving certificate names that address; clients authenticate as ever).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "kube-env: $*" >&2; }
die() { log "$*"; exit 1; }

usage() { die "usage: $0 start|stop DIR"; }
[ $# -eq 2 ] || usage
cmd="$1"
case "$cmd" in
  start) mkdir -p "$2" ;;
  stop) [ -d "$2" ] || exit 0 ;;
  *) usage ;;
esac
dir="$(cd "$2" && pwd)"

# ---- stop --------------------------------------------------------------------------------------------------
# stop_one NAME: SIGTERM the process whose pid is in DIR/NAME.pid (only if it still runs NAME), wait up to
# 1 s, then SIGKILL. A test's apiserver and etcd need no graceful end: the apiserver spent ~3 s of it
# draining and etcd ~2 s, 5 s per stop and minutes over the suite's apiservers, while etcd's write-ahead log
# keeps every committed write across a kill, so a start on the same DIR comes back with the same objects.
# shellcheck source=lib/proc.sh
. "$here/lib/proc.sh"
stop_one() {
  local name="$1" pidfile="$dir/$1.pid" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
     && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 10); do
      proc_running "$pid" || break
      sleep 0.1
    done
    if proc_running "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 50); do proc_running "$pid" || break; sleep 0.1; done
    fi
    # A child of this shell (stop after a failed start) is reaped here; otherwise wait is a no-op.
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

stop_all() {
  stop_one kube-apiserver
  stop_one etcd
}

if [ "$cmd" = stop ]; then
  stop_all
  exit 0
fi
[ "$cmd" = start ] || usage

# ---- start -------------------------------------------------------------------------------------------------
for f in kube-apiserver etcd; do
  if [ -f "$dir/$f.pid" ] && kill -0 "$(cat "$dir/$f.pid")" 2>/dev/null; then
    die "$f already runs from $dir (pid $(cat "$dir/$f.pid")): run '$0 stop $dir' first"
  fi
done

if [ -z "${KUBE_APISERVER:-}" ] || [ -z "${ETCD:-}" ]; then
  paths="$("$here/kube-tools.sh" --print)" || die "kube tools are not built: run scripts/kube-tools.sh"
  eval "$(printf '%s\n' "$paths" | grep -E '^(KUBE_APISERVER|ETCD)=' | sed 's/^/tools_/')"
  KUBE_APISERVER="${KUBE_APISERVER:-$tools_KUBE_APISERVER}"
  ETCD="${ETCD:-$tools_ETCD}"
fi
[ -x "$KUBE_APISERVER" ] || die "no kube-apiserver at $KUBE_APISERVER"
[ -x "$ETCD" ] || die "no etcd at $ETCD"
command -v openssl >/dev/null || die "openssl is missing (apt-get install openssl)"
command -v curl >/dev/null || die "curl is missing (apt-get install curl)"

# From here on, whatever fails stops what was started.
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

# free_port [PREFERRED]: sets $port to a free TCP port on 127.0.0.1 that none of the ports already picked
# uses (not in a $(...) subshell, so $picked remembers it): PREFERRED when it is free, else a random one.
# Racy by nature (as envtest's): a process that loses the race exits, and its start is retried below on
# fresh ports (a port lost once is in $picked, so the retry does not prefer it again).
picked=" "
free_port() {
  local p
  for try in $(seq 200); do
    p=$(( 20000 + RANDOM % 40000 ))
    [ "$try" -gt 1 ] || [ -z "${1:-}" ] || p=$1
    case "$picked" in *" $p "*) continue ;; esac
    if [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ] && ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      picked+="$p "
      port="$p"
      return 0
    fi
  done
  die "no free port found"
}
# Keys and the static token: made once per DIR, kept across restarts.
mkdir -p "$dir/certs" "$dir/etcd"
chmod 700 "$dir/certs" "$dir/etcd"
if [ ! -s "$dir/sa.key" ]; then
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
fi
if [ ! -s "$dir/token" ]; then
  (umask 077; openssl rand -hex 32 > "$dir/token")
fi
token="$(cat "$dir/token")"
# The client CA and the apiserver's client certificate for kubelets (P-256 keys: fast to make).
if [ ! -s "$dir/client-ca.key" ]; then
  (umask 077
   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
     -subj "/CN=conduit-e2e-client-ca" -keyout "$dir/client-ca.key" -out "$dir/client-ca.crt" 2>/dev/null)
fi
if [ ! -s "$dir/kubelet-client.key" ]; then
  (umask 077
   openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
     -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" -keyout "$dir/kubelet-client.key" 2>/dev/null \
   | openssl x509 -req -CA "$dir/client-ca.crt" -CAkey "$dir/client-ca.key" -CAcreateserial -days 3650 \
       -out "$dir/kubelet-client.crt" 2>/dev/null)
fi
admission=(--disable-admission-plugins=ServiceAccount --enable-admission-plugins=NodeRestriction)
api_host=127.0.0.1
if [ "${CONDUIT_KUBE_NODE:-0}" = 1 ]; then
  admission=(--enable-admission-plugins=NodeRestriction)
  # shellcheck source=lib/node-ip.sh
  . "$here/lib/node-ip.sh"
  api_host="$(node_ip)" || die "CONDUIT_KUBE_NODE=1: this machine has no node address (no default route, no global IPv4)"
fi
# token,user,uid,"group,..."
(umask 077; printf '%s,conduit-admin,conduit-admin,"system:masters"\n' "$token" > "$dir/tokens.csv")

# alive NAME: the process in DIR/NAME.pid still runs.
alive() { kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }
died() { die "$1 exited during start; last lines of $dir/$1.log:"$'\n'"$(tail -n 15 "$dir/$1.log")"; }

# ---- etcd
# Ports are picked free but can be taken before etcd binds them (other test environments start at the same
# time): a start that dies on "address already in use" is retried on fresh ports, up to 3 times.
in_use() { grep -q 'address already in use' "$dir/$1.log" 2>/dev/null; }
start_etcd() {
  free_port "$prev_etcd_port"; etcd_port=$port
  free_port "$prev_etcd_peer_port"; etcd_peer_port=$port
  etcd_url="http://127.0.0.1:$etcd_port"
  local etcd_args=(
    --name default
    --data-dir "$dir/etcd"
    --listen-client-urls "$etcd_url"
    --advertise-client-urls "$etcd_url"
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port"
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port"
    --initial-cluster "default=http://127.0.0.1:$etcd_peer_port"
    --initial-cluster-state new
  )
  # Tests need no durability: etcd >= 3.5 can skip fsync, as envtest does.
  if "$ETCD" --help 2>&1 | grep -q -- '--unsafe-no-fsync'; then
    etcd_args+=(--unsafe-no-fsync)
  fi
  "$ETCD" "${etcd_args[@]}" < /dev/null > "$dir/etcd.log" 2>&1 &
  echo $! > "$dir/etcd.pid"
  for _ in $(seq 300); do
    alive etcd || return 1
    if curl -sf --max-time 2 "$etcd_url/health" 2>/dev/null | grep -q '"health":"true"'; then return 0; fi
    sleep 0.1
  done
  die "etcd not healthy at $etcd_url after 30 s (log: $dir/etcd.log)"
}
# The ports of the previous start on this DIR, if any.
prev_etcd_port="" prev_etcd_peer_port="" prev_api_port=""
if [ -f "$dir/env" ]; then
  prev_etcd_port="$(sed -n 's#^ETCD_URL=http://127.0.0.1:##p' "$dir/env")"
  prev_etcd_peer_port="$(sed -n 's#^ETCD_PEER_URL=http://127.0.0.1:##p' "$dir/env")"
  prev_api_port="$(sed -n 's#^KUBE_APISERVER_URL=https://[0-9.]*:##p' "$dir/env")"
fi
etcd_fresh=0
[ -n "$(ls -A "$dir/etcd")" ] || etcd_fresh=1
for attempt in 1 2 3; do
  start_etcd && break
  in_use etcd && [ "$attempt" -lt 3 ] || died etcd
  log "etcd lost its port to another process: retrying on fresh ports"
  wait "$(cat "$dir/etcd.pid")" 2>/dev/null || true
  # A first start may have recorded the lost peer URL in its new data dir.
  [ "$etcd_fresh" -eq 0 ] || find "$dir/etcd" -mindepth 1 -delete
done

# ---- kube-apiserver
start_apiserver() {
  free_port "$prev_api_port"; api_port=$port
  api_url="https://$api_host:$api_port"
  # shellcheck disable=SC2054 # --authorization-mode's value is a comma-separated list
  local api_args=(
    --etcd-servers="$etcd_url"
    --cert-dir="$dir/certs"
    --secure-port="$api_port"
    --bind-address="$api_host"
    --advertise-address="$api_host"
    --service-cluster-ip-range=10.0.0.0/24
    --allow-privileged=true
    --authorization-mode=Node,RBAC
    "${admission[@]}"
    --client-ca-file="$dir/client-ca.crt"
    --kubelet-client-certificate="$dir/kubelet-client.crt"
    --kubelet-client-key="$dir/kubelet-client.key"
    # A test node's name does not resolve; its InternalIP (the kubelet's --node-ip) does.
    --kubelet-preferred-address-types=InternalIP,Hostname
    --service-account-issuer=https://kubernetes.default.svc
    --service-account-key-file="$dir/sa.pub"
    --service-account-signing-key-file="$dir/sa.key"
    --token-auth-file="$dir/tokens.csv"
    # The default reconciler would publish 127.0.0.1 as the "kubernetes" Service's endpoint, which validation
    # rejects (loopback), logging an error every 10 s. Nothing here needs that endpoint.
    --endpoint-reconciler-type=none
  )
  "$KUBE_APISERVER" "${api_args[@]}" < /dev/null > "$dir/kube-apiserver.log" 2>&1 &
  echo $! > "$dir/kube-apiserver.pid"

  for _ in $(seq 1200); do
    alive kube-apiserver || return 1
    if [ "$(curl -sk --max-time 2 -H "Authorization: Bearer $token" "$api_url/readyz" 2>/dev/null)" = ok ]; then
      return 0
    fi
    sleep 0.1
  done
  die "kube-apiserver not ready at $api_url/readyz after 120 s (log: $dir/kube-apiserver.log)"
}
for attempt in 1 2 3; do
  start_apiserver && break
  in_use kube-apiserver && [ "$attempt" -lt 3 ] || died kube-apiserver
  log "kube-apiserver lost its port to another process: retrying on a fresh port"
  wait "$(cat "$dir/kube-apiserver.pid")" 2>/dev/null || true
done

# The apiserver's self-signed serving certificate file holds the serving cert and the CA that signed it.
ca="$dir/certs/apiserver.crt"
[ -s "$ca" ] || die "no serving certificate in $dir/certs"
curl -sf --max-time 5 --cacert "$ca" -H "Authorization: Bearer $token" "$api_url/readyz" > /dev/null \
  || die "$api_url does not verify against $ca"

cat > "$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: conduit-e2e
  cluster:
    server: $api_url
    certificate-authority-data: $(base64 -w0 < "$ca")
users:
- name: conduit-admin
  user:
    token: $token
contexts:
- name: conduit-e2e
  context:
    cluster: conduit-e2e
    user: conduit-admin
    namespace: default
current-context: conduit-e2e
EOF
chmod 600 "$dir/kubeconfig"

cat > "$dir/env" <<EOF
ETCD_URL=$etcd_url
ETCD_PEER_URL=http://127.0.0.1:$etcd_peer_port
KUBE_APISERVER_URL=$api_url
KUBECONFIG=$dir/kubeconfig
EOF

started=0
log "etcd at $etcd_url ($ETCD), kube-apiserver at $api_url ($KUBE_APISERVER), logs in $dir"
echo "export KUBECONFIG=$dir/kubeconfig"
