#!/usr/bin/env bash
# The whole test suite: formatting, a release build with every test, and a second build of the tests
# under AddressSanitizer + UndefinedBehaviorSanitizer with every test again.
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

echo "== metrics docs, dashboards and alerts against a real Prometheus"
scripts/check-observability.sh build
tests/e2e/prometheus_test.sh build

echo "== Helm chart (real helm, real apiserver) and the images' runtime libraries"
tests/e2e/helm_test.sh
tests/e2e/image_libs_test.sh build

echo "== ASan + UBSan build"
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DCONDUIT_SANITIZE=ON
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j1 --timeout 900)
echo "== all tests passed (release and ASan/UBSan), $jobs cores"
