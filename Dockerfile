# syntax=docker/dockerfile:1.7
# Image for omni-operator: the Rust binary plus the helm CLI it drives for OmniHelmRelease, on a
# distroless non-root base. Build: docker build -t ghcr.io/texas-hpc/omni-operator:<version> .
# (multi-arch: docker buildx build --platform linux/amd64,linux/arm64; see docs/install.md).

ARG RUST_VERSION=1.95
# helm release and the SHA-256 of its linux tarballs, from the release notes on
# https://github.com/helm/helm/releases (bump all three together).
ARG HELM_VERSION=v4.1.4
ARG HELM_SHA256_AMD64=70b2c30a19da4db264dfd68c8a3664e05093a361cefd89572ffb36f8abfa3d09
ARG HELM_SHA256_ARM64=13d03672be289045d2ff00e4e345d61de1c6f21c1257a45955a30e8ae036d8f1

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build artefacts between builds; the binary is copied out of
# the cached target directory because cache mounts are not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p omni-operator --bin omni-operator \
    && install -D -m 0755 target/release/omni-operator /out/omni-operator

FROM debian:bookworm-slim AS helm
ARG HELM_VERSION
ARG HELM_SHA256_AMD64
ARG HELM_SHA256_ARM64
ARG TARGETARCH
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
RUN set -eu; \
    arch="${TARGETARCH:-amd64}"; \
    case "$arch" in \
      amd64) sum="$HELM_SHA256_AMD64" ;; \
      arm64) sum="$HELM_SHA256_ARM64" ;; \
      *) echo "no pinned helm checksum for $arch" >&2; exit 1 ;; \
    esac; \
    curl -fsSL -o /tmp/helm.tar.gz "https://get.helm.sh/helm-${HELM_VERSION}-linux-${arch}.tar.gz"; \
    echo "${sum}  /tmp/helm.tar.gz" | sha256sum -c -; \
    tar -xzf /tmp/helm.tar.gz -C /tmp; \
    install -D -m 0755 "/tmp/linux-${arch}/helm" /out/helm

# glibc runtime (the binary links it dynamically); "nonroot" runs as UID/GID 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="omni-cluster-operator" \
      org.opencontainers.image.description="Kubernetes operator for Sidero Omni clusters" \
      org.opencontainers.image.source="https://github.com/texas-hpc/omni-operator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/omni-operator /omni-operator
COPY --from=helm /out/helm /usr/local/bin/helm
# helm's cache, config and data live under the work directory (the operator sets HELM_*_HOME
# itself); the chart mounts an emptyDir at /tmp/omni-cluster-operator.
ENV HELM_WORK_DIR=/tmp/omni-cluster-operator/helm \
    HELM_BINARY=/usr/local/bin/helm
USER 65532:65532
# `docker run <image>` runs the operator; Kubernetes `args` replace CMD and start with `run`.
ENTRYPOINT ["/omni-operator"]
CMD ["run"]
