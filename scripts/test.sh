#!/usr/bin/env bash
# The whole test suite: formatting; a release build with every test, the Kubernetes end-to-end tests, the
# fault suites, hostile input, observability, Helm (and the chart on a real node) and a bounded load run;
# short fuzzing of every decoder; then every test again under AddressSanitizer + UndefinedBehaviorSanitizer
# (+ LeakSanitizer; with the CUDA code compiled in) and under ThreadSanitizer. Each stage's header shows the
# time since the start.
#
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    a developer's loop: format, the release build, the tests that need no second
#                              process or apiserver (ctest -LE 'integration|kube'), and the main job end to end
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/proc.sh
. scripts/lib/proc.sh
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
stage() { printf '== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

scripts/install-deps.sh
scripts/check-format.sh

if [ "$quick" = 1 ]; then
  stage "release build"
  scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
  stage "unit tests (no fabric peers, no apiserver)"
  (cd build && ctest --output-on-failure -j2 --timeout 600 -LE 'integration|kube')
  stage "the main job end to end (scripts/run-main.sh)"
  scripts/run-main.sh
  stage "quick tier passed (the whole suite: scripts/test.sh)"
  exit 0
fi

# The suite fails when any test leaves a process of ours running (an agent re-parented to init still holds
# memory and ports). Processes that were running before the suite started are not ours to judge.
# comm, at most 15 characters: conduit-agent, conduit-control, kube-controller, containerd-shim, ...
ours='^(conduit|kube-apiserver|etcd|kubelet|kube-scheduler|kube-controller|containerd)'
# (pgrep warns that a pattern this long matches nothing; it matches the comm names fine)
before=$(pgrep -d ' ' "$ours" 2>/dev/null || true)
left_behind() {
  local pid now=()
  for pid in $(pgrep "$ours" 2>/dev/null || true); do
    proc_running "$pid" || continue
    [[ " $before " == *" $pid "* ]] || now+=("$pid $(cat /proc/"$pid"/comm 2>/dev/null)")
  done
  if [ ${#now[@]} -gt 0 ]; then
    echo "test.sh: processes left behind by the suite: ${now[*]}" >&2
    return 1
  fi
}

jobs=$(nproc)
stage "a real kube-apiserver + etcd + kubectl, and a node's kubelet, scheduler, controller-manager and crictl, for"
echo "   the Kubernetes tests (built once from Go modules, cached outside the repo; containerd and CNI from Debian)"
scripts/install-deps.sh --node
scripts/kube-tools.sh --node

stage "release build"
# -g1: line tables for stack traces and sanitizer-free debugging of test failures, without the full debug
# info that costs ~12% of this build's compile time (shipped images are built by their own Dockerfiles).
scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
# Two at a time here and in the sanitizer trees: most tests wait on processes and sockets, and every tree
# passes so on 2 cores (measured: ASan 430 tests in 149 s, TSan 430 in 178 s).
# Here the logic tests only, optimised as shipped (a minute, and a wrong answer shows before the scenarios
# start); the tests with fabric peers, agents and an apiserver run once under each sanitizer below, which
# are stricter about the same code, and the scenario suites drive these release binaries throughout.
stage "release unit tests (ctest -LE 'integration|kube'; every test runs under ASan and TSan below)"
(cd build && ctest --output-on-failure -j2 --timeout 600 -LE 'integration|kube')

# The scenario suites run under pytest on one harness (tests/scenarios/harness): real agents, controllers,
# network namespaces and apiservers; a test that leaves a process behind fails.
stage "Kubernetes end to end with real kubectl"
tests/scenarios/run.sh e2e/test_kube_smoke.py build tests/scenarios/e2e/test_crd.py tests/scenarios/e2e/test_cluster.py \
  tests/scenarios/e2e/test_preflight.py tests/scenarios/e2e/test_pods.py tests/scenarios/e2e/test_node_certificates.py \
  tests/scenarios/e2e/test_reshard_job.py

stage "faults (docs/reliability.md): agents killed, links cut or lossy, a flipped byte, the memory cap; the"
echo "   controller killed repeatedly, the apiserver restarted, leadership lost"
tests/scenarios/run.sh faults build

stage "Python SDK (python/): shared buffers, transfers, versions, TransferJobs local and through the apiserver"
tests/scenarios/run.sh sdk build

stage "hostile input: schemathesis over agent/openapi.yaml (fixed seed), huge bodies, slow clients, floods, traversal"
tests/scenarios/run.sh hostile build
stage "load: 200 concurrent verified transfers through one agent pair, bounded time, RSS stable"
LOAD_SECONDS=20 tests/scenarios/run.sh load build

stage "metrics docs, dashboards and alerts against a real Prometheus"
scripts/check-observability.sh build
tests/scenarios/run.sh e2e/test_prometheus.py build

stage "Helm chart (real helm, real apiserver), the images' runtime libraries, and the chart on a real node"
echo "   (containerd + kubelet: docs/test-node.md)"
tests/scenarios/run.sh e2e/test_helm.py build tests/scenarios/e2e/test_image_libs.py tests/scenarios/node

stage "DRA driver conduit.dev (Go, built once and cached outside the repo): its unit tests, then ResourceSlices,"
echo "   scheduling and the kubelet plugin against a real apiserver, kube-scheduler and kubelet (docs/dra.md)"
scripts/dra-build.sh --test >/dev/null
tests/scenarios/run.sh dra build

left_behind
# One clang tree serves both the fuzzers and the ASan tests (it was two: a clang fuzz tree and a gcc ASan tree
# that compiled every library twice). Its libraries are built as scripts/fuzz.sh builds them (-O1, libFuzzer
# coverage, ASan + UBSan); the code under tests/ at -O0 without coverage (CONDUIT_TEST_COMPILE_OPTIONS), as a
# plain Debug build would. -g1: the line tables sanitizer and fuzzer reports need, without the full
# debug info that costs compile time and that no test reads.
stage "ASan + UBSan + LeakSanitizer build (clang), with the CUDA code compiled in (driver headers from PyPI;"
echo "   no GPU here), and the libFuzzer targets"
scripts/build.sh build-asan -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
  -DCONDUIT_TEST_COMPILE_OPTIONS="-O0;-fno-sanitize=fuzzer-no-link" \
  -DCONDUIT_SANITIZE=ON -DCONDUIT_FUZZ=ON -DCONDUIT_CUDA=ON -DCONDUIT_CUDA_INCLUDE_DIR="$(scripts/cuda-headers.sh)" \
  -- conduit-tests conduit-fuzz-all

stage "fuzzing: every decoder of outside bytes, 20 s each from its seed corpus (libFuzzer, ASan + UBSan)"
scripts/fuzz.sh 20 build-asan

stage "ASan + UBSan + LeakSanitizer tests"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j2 --timeout 900)

stage "ThreadSanitizer build (prebuilt libraries are not instrumented: docs/reliability.md, Sanitizers)"
# -g1: line tables for TSan's reports, without the full debug info (variable tracking at -O2 is slow).
scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCONDUIT_TSAN=ON -- conduit-tests
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1" \
  ctest --output-on-failure -j2 --timeout 900)
left_behind
stage "all tests passed (release, ASan/UBSan/LSan, TSan), $jobs cores"
