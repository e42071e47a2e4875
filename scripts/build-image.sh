#!/usr/bin/env bash
# `make image`: builds kafka-py's image (deploy/image/Containerfile) and, with ZOOKEEPER=1 (the
# default), the simulation's ZooKeeper image, with podman (docker when podman is absent).
#   BASE_IMAGE  base of both images (default: the debootstrap base scripts/build-base-image.sh
#               makes, since these machines cannot pull; e.g. docker.io/library/python:3.11-slim-bookworm)
#   IMAGE       tag of the kafka-py image (default localhost/kafka-py:<version>)
#   CA_BUNDLE   CA bundle mounted for pip (TLS-intercepting proxies; default: the host's, if any)
# Prints the build time and the image size.
set -euo pipefail
# One build at a time on a machine: `make test` starts one in the background and the kube-sim
# tier's fixture runs this again; the second waits here, then finds the images cached. (flock -o:
# the lock is the flock process's, never inherited by what podman leaves running.)
if [ -z "${KAFKAPY_IMAGE_BUILD_LOCKED:-}" ]; then
  export KAFKAPY_IMAGE_BUILD_LOCKED=1
  exec flock -o "${TMPDIR:-/tmp}/kafka-py-image-build.lock" "$0" "$@"
fi
cd "$(dirname "$0")/.."

ENGINE=${CONTAINER_ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
IMAGE=${IMAGE:-localhost/kafka-py:$VERSION}
ZK_IMAGE=${ZK_IMAGE:-localhost/kafka-py-zookeeper:$VERSION}
LOCAL_BASE=localhost/kafka-py-base:bookworm
if [ -z "${BASE_IMAGE:-}" ]; then
  [ "$ENGINE" = podman ] && ./scripts/podman-setup.sh
  ./scripts/build-base-image.sh
  BASE_IMAGE=$LOCAL_BASE
fi
CA_BUNDLE=${CA_BUNDLE:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
ca_args=()
if [ -f "$CA_BUNDLE" ]; then
  ca_args=(-v "$(readlink -f "$CA_BUNDLE"):/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi
common=(--build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION")

start=$(date +%s)
$ENGINE build -q -f deploy/image/Containerfile "${common[@]}" "${ca_args[@]}" -t "$IMAGE" . >/dev/null
echo "image: $IMAGE built in $(( $(date +%s) - start )) s," \
  "$($ENGINE image inspect "$IMAGE" --format '{{.Size}}') bytes (base $BASE_IMAGE)"
if [ "${ZOOKEEPER:-1}" = 1 ]; then
  start=$(date +%s)
  $ENGINE build -q -f deploy/image/zookeeper.Containerfile "${common[@]}" -t "$ZK_IMAGE" . >/dev/null
  echo "image: $ZK_IMAGE built in $(( $(date +%s) - start )) s," \
    "$($ENGINE image inspect "$ZK_IMAGE" --format '{{.Size}}') bytes"
fi
