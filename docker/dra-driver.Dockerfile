# syntax=docker/dockerfile:1
# conduit-dra-driver, the DRA driver conduit.dev's DaemonSet (helm/conduit dra.image; docs/dra.md). Build from
# the repository root:
#   docker build -f docker/dra-driver.Dockerfile -t conduit/conduit-dra-driver:0.1.0 .
#
# A static Go binary (CGO_ENABLED=0) on an empty image: it needs no shared library and no shell.

FROM golang:1.24-bookworm AS build
WORKDIR /src
COPY dra/go.mod dra/go.sum ./
RUN go mod download
COPY dra/ ./
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/conduit-dra-driver ./cmd/conduit-dra-driver

FROM scratch
COPY --from=build /out/conduit-dra-driver /usr/bin/conduit-dra-driver
ENV PATH=/usr/bin
# root: as the kubelet's DRA plugin it makes sockets in the kubelet's directories and writes CDI specs into the
# runtime's (hostPath volumes owned by root); it runs with no capabilities and a read-only root filesystem.
USER 0
ENTRYPOINT ["/usr/bin/conduit-dra-driver"]
