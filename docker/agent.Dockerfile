# syntax=docker/dockerfile:1
# conduit-agent, the node DaemonSet (helm/conduit agent.image). Build from the repository root:
#   docker build -f docker/agent.Dockerfile -t conduit/conduit-agent:0.1.0 .
#
# Two stages: a Debian 12 builder with every build dependency (scripts/install-deps.sh, the same list the
# project builds and tests with), and a bookworm-slim runtime with only the shared libraries the binary
# links. tests/scenarios/e2e/test_image_libs.py checks that list against `ldd` of a real build, so a new library
# dependency fails the test suite until it is added below.
#
# CUDA: this image is built without it (CONDUIT_CUDA=OFF): the agent then reports GPU memory unavailable and
# moves host and file regions. A GPU-direct image builds on an nvidia/cuda base with CONDUIT_CUDA=ON.

ARG DEBIAN_RELEASE=bookworm

FROM debian:${DEBIAN_RELEASE} AS build
ARG CONDUIT_CUDA=OFF
WORKDIR /src
# Dependencies first, so editing the source reuses this layer.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF \
          -DCONDUIT_CUDA=${CONDUIT_CUDA} \
 && ninja -C /build conduit-agent \
 && strip --strip-debug -o /conduit-agent /build/bin/conduit-agent

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# Every Debian package whose libraries `ldd conduit-agent` resolves to, and nothing else. The ones bookworm-slim
# already has (libc6, libgcc-s1, libstdc++6, zlib1g, libuuid1) are listed too: apt-get leaves them as they
# are, and the image stays correct if the base image ever drops one.
# ibverbs-providers also holds the user-space NIC drivers (mlx5, efa, ...) that libibverbs loads at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libc6 \
      libgcc-s1 \
      libstdc++6 \
      libatomic1 \
      zlib1g \
      libuuid1 \
      libssl3 \
      libbrotli1 \
      libboost-program-options1.74.0 \
      libcpp-httplib0.11 \
      libyaml-cpp0.7 \
      libprometheus-cpp-core1.0 \
      libisal2 \
      libfabric1 \
      libibverbs1 \
      librdmacm1 \
      ibverbs-providers \
      libnl-3-200 \
      libnl-route-3-200 \
      libnuma1 \
      libpsm2-2 \
      libpsm-infinipath1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /conduit-agent /usr/bin/conduit-agent
# Root, on purpose: the agent opens the root-owned /dev/infiniband devices and the kubelet's pod-resources
# socket, writes the root-owned hostPath data directory, and pins memory with CAP_IPC_LOCK. Kubernetes adds
# capabilities only to root's effective set (a non-root process gets them only through file capabilities,
# which hostPath mounts and read-only images make brittle). The chart drops every other capability.
USER 0:0
EXPOSE 7070
ENTRYPOINT ["/usr/bin/conduit-agent"]
CMD ["--listen=0.0.0.0:7070", "--log-format=json"]
