#!/usr/bin/env bash
# Runs one scenario suite (or several) under pytest in the test venv (scripts/python-env.sh makes it once).
#
#   tests/scenarios/run.sh SUITE [BUILD_DIR] [PYTEST_ARGS...]     e.g. tests/scenarios/run.sh faults build -k link_cut
#
# SUITE is a folder of tests/scenarios (faults, e2e, ...) or a path under it; BUILD_DIR defaults to build.
# Ends with pytest's summary line ("N passed ..."); exits non-zero when a test failed or left a process running.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 SUITE [BUILD_DIR] [PYTEST_ARGS...]" >&2; exit 2; }
suite="$1"
shift
build=build
if [ $# -ge 1 ] && [[ "$1" != -* ]]; then
  build="$1"
  shift
fi
build="$(cd "$build" 2> /dev/null && pwd)" || { echo "scenarios: no build directory $build" >&2; exit 1; }
case "$suite" in
  /*) ;;
  tests/scenarios/*) suite="$root/$suite" ;;
  *) suite="$root/tests/scenarios/$suite" ;;
esac
venv="$("$root/scripts/python-env.sh")"
cd "$root"
PYTHONDONTWRITEBYTECODE=1 exec "$venv/bin/python" -m pytest "$suite" --build-dir "$build" "$@"
