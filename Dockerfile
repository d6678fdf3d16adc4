# syntax=docker/dockerfile:1
#
# One Dockerfile for every production binary of toolfleet. Pick the binary with
# --build-arg CMD (a package path of this module):
#
#   docker build --build-arg CMD=./cmd/gateway        -t toolfleet-gateway .
#   docker build --build-arg CMD=./cmd/orchestrator   -t toolfleet-orchestrator .
#   docker build --build-arg CMD=./workers/calculator -t toolfleet-worker-calculator .
#
# Stages: modules (go mod download into a cache mount, shared by every binary),
# build (a static CGO_ENABLED=0 binary; sources bind-mounted, build cache in a
# cache mount), and a distroless static image running as non-root 65532 with
# nothing but the binary and CA certificates. Tilt does not use this file: it
# compiles on the host and copies the binary with k8s/tilt/Dockerfile.

ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS modules
WORKDIR /src
ENV GOTOOLCHAIN=local CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=bind,source=go.mod,target=go.mod \
    --mount=type=bind,source=go.sum,target=go.sum \
    go mod download

FROM modules AS build
ARG CMD=./cmd/gateway
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    --mount=type=bind,target=/src \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/app "${CMD}"

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/app /app
USER 65532:65532
ENTRYPOINT ["/app"]
