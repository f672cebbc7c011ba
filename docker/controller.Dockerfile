# syntax=docker/dockerfile:1
# conduit-controller, the TransferJob controller Deployment (helm/conduit controller.image). Build from the
# repository root:
#   docker build -f docker/controller.Dockerfile -t conduit/conduit-controller:0.1.0 .
#
# Two stages: a Debian 12 builder with every build dependency (scripts/install-deps.sh), and a bookworm-slim
# runtime with only the shared libraries the binary links, running as a non-root user.
# tests/scenarios/e2e/test_image_libs.py checks that list against `ldd` of a real build.

ARG DEBIAN_RELEASE=bookworm

FROM debian:${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF -DCONDUIT_CUDA=OFF \
 && ninja -C /build conduit-controller \
 && strip --strip-debug -o /conduit-controller /build/bin/conduit-controller

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# Every Debian package whose libraries `ldd conduit-controller` resolves to. libc6, libgcc-s1, libstdc++6 and
# zlib1g are in bookworm-slim already and listed anyway (apt-get keeps them; the list stays complete).
# No ca-certificates: the controller trusts the cluster CA from its ServiceAccount (ca.crt), not the system's.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libc6 \
      libgcc-s1 \
      libstdc++6 \
      zlib1g \
      libssl3 \
      libbrotli1 \
      libboost-program-options1.74.0 \
      libcpp-httplib0.11 \
      libyaml-cpp0.7 \
      libprometheus-cpp-core1.0 \
 && rm -rf /var/lib/apt/lists/*
# The same uid/gid the chart's securityContext uses (runAsNonRoot needs a numeric USER to verify).
RUN groupadd --system --gid 65532 conduit \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin conduit
COPY --from=build /conduit-controller /usr/bin/conduit-controller
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/bin/conduit-controller"]
