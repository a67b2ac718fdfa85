# syntax=docker/dockerfile:1
# Images of callbackd and the operator for those who build with Docker (BuildKit). `make images`
# builds the same images without a container engine (hack/imagebuild); both give a static binary
# at /usr/local/bin/<component> as the entrypoint, run as the numeric user 65532, with no shell.
#
#   docker build --build-arg COMPONENT=callbackd -t ghcr.io/seed-1cff2221/callback-platform/callbackd:v0.1.0 .
#   docker build --build-arg COMPONENT=operator  -t ghcr.io/seed-1cff2221/callback-platform/operator:v0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg COMPONENT=operator ...
#
# VERSION defaults to appVersion in charts/callback-platform/Chart.yaml, the one place the
# release version (and the chart's default image tag) is written.

ARG COMPONENT=callbackd
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG COMPONENT
ARG VERSION
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    version="${VERSION:-$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$/\1/p' charts/callback-platform/Chart.yaml)}" && \
    CGO_ENABLED=0 GOOS="$TARGETOS" GOARCH="$TARGETARCH" go build -trimpath \
      -ldflags "-s -w -X github.com/seed-1cff2221/callback-platform/callbackd/cli.Version=${version}" \
      -o /out/${COMPONENT} ./cmd/${COMPONENT}

# Distroless static: CA certificates, /etc/passwd with nonroot (65532), /tmp; no shell.
FROM gcr.io/distroless/static-debian13:nonroot AS base
LABEL org.opencontainers.image.source="https://github.com/seed-1cff2221/callback-platform"
USER 65532:65532
WORKDIR /

FROM base AS callbackd
LABEL org.opencontainers.image.title="callbackd"
COPY --from=build /out/callbackd /usr/local/bin/callbackd
ENTRYPOINT ["/usr/local/bin/callbackd"]

FROM base AS operator
LABEL org.opencontainers.image.title="operator"
COPY --from=build /out/operator /usr/local/bin/operator
ENTRYPOINT ["/usr/local/bin/operator"]

# The image built without --target: the stage named by COMPONENT.
FROM ${COMPONENT}
