#!/usr/bin/env bash
# ctest fixture around scripts/kube-env.sh: one etcd + kube-apiserver for all the kube tests of a ctest run
# (each test is its own process; starting one per process costs ~8 s each). The tests find it through
# CONDUIT_KUBE_ENV_DIR. Without the binaries the start succeeds doing nothing and the tests skip.
#
#   kube_env_fixture.sh start|stop DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -eq 2 ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
dir="$2"
case "$1" in
  start)
    # Whatever an earlier aborted run left in DIR is stopped first, so nothing is orphaned.
    "$root/scripts/kube-env.sh" stop "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"
    if [ -z "${KUBE_APISERVER:-}" ] && ! "$root/scripts/kube-tools.sh" --print >/dev/null 2>&1; then
      echo "no kube-apiserver built (run scripts/kube-tools.sh): the kube API tests will skip"
      exit 0
    fi
    "$root/scripts/kube-env.sh" start "$dir"
    ;;
  stop)
    "$root/scripts/kube-env.sh" stop "$dir"
    rm -rf "$dir"
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
