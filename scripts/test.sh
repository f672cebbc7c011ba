#!/usr/bin/env bash
# The whole test suite: formatting; a release build with every test, the Kubernetes end-to-end tests, the
# fault suites, hostile input, observability, Helm and a bounded load run; short fuzzing of every decoder;
# then every test again under AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer; with the CUDA
# code compiled in) and under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/check-format.sh

jobs=$(nproc)
echo "== a real kube-apiserver + etcd + kubectl for the Kubernetes tests (built once from Go modules, cached outside the repo)"
scripts/kube-tools.sh

echo "== release build"
scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build && ctest --output-on-failure -j1 --timeout 600)

echo "== Kubernetes end to end with real kubectl"
tests/e2e/kube_smoke.sh
tests/e2e/crd_test.sh
tests/e2e/cluster_test.sh build

echo "== data-plane faults: agents killed, links cut or lossy, a flipped byte, the memory cap (docs/reliability.md)"
tests/faults/run.sh build
echo "== control-plane faults: controller killed repeatedly, apiserver restarted, leadership lost (docs/reliability.md)"
tests/faults/control_plane_test.sh build

echo "== hostile input: schemathesis over agent/openapi.yaml (fixed seed), huge bodies, slow clients, floods, traversal"
tests/hostile/rest_test.sh build
echo "== load: 200 concurrent verified transfers through one agent pair, bounded time, RSS stable"
LOAD_SECONDS=20 bench/load_test.sh build

echo "== metrics docs, dashboards and alerts against a real Prometheus"
scripts/check-observability.sh build
tests/e2e/prometheus_test.sh build

echo "== Helm chart (real helm, real apiserver) and the images' runtime libraries"
tests/e2e/helm_test.sh
tests/e2e/image_libs_test.sh build

echo "== fuzzing: every decoder of outside bytes, 20 s each from its seed corpus (libFuzzer, ASan + UBSan)"
scripts/fuzz.sh 20 build-fuzz

echo "== ASan + UBSan + LeakSanitizer build, with the CUDA code compiled in (driver headers from PyPI; no GPU here)"
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DCONDUIT_SANITIZE=ON \
  -DCONDUIT_CUDA=ON -DCONDUIT_CUDA_INCLUDE_DIR="$(scripts/cuda-headers.sh)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j1 --timeout 900)

echo "== ThreadSanitizer build (prebuilt libraries are not instrumented: docs/reliability.md, Sanitizers)"
scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONDUIT_TSAN=ON
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1" \
  ctest --output-on-failure -j1 --timeout 900)
echo "== all tests passed (release, ASan/UBSan/LSan, TSan), $jobs cores"
