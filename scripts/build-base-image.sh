#!/usr/bin/env bash
# Builds the Debian base image `localhost/kafka-py-base:bookworm` with debootstrap, for machines
# that cannot pull from a container registry: minbase bookworm from the Debian mirror apt already
# uses, plus python3, venv, tini and CA certificates, imported with PATH set (kube play needs it).
# Idempotent: does nothing when the image exists (FORCE=1 rebuilds).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${BASE_IMAGE_NAME:-localhost/kafka-py-base:bookworm}
SUITE=${SUITE:-bookworm}
ENGINE=${CONTAINER_ENGINE:-podman}

if [ -z "${FORCE:-}" ] && $ENGINE image exists "$IMAGE" 2>/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then echo "build-base-image: debootstrap needs root" >&2; exit 1; fi

# The mirror apt uses here (deb822 or one-line sources), else Debian's own.
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
  2>/dev/null | grep -vE '^[[:space:]]*#' | grep -oE 'https?://[^ ]+/debian/?' | head -n1 || true)
mirror=${MIRROR:-${mirror:-http://deb.debian.org/debian}}

root=$(mktemp -d /var/tmp/kafka-py-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
start=$(date +%s)
debootstrap --variant=minbase --include=python3,python3-venv,tini,ca-certificates \
  "$SUITE" "$root" "$mirror" >"$root.log" 2>&1 || { tail -n 20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
# Keep the image small: no apt lists, docs or caches.
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
  "$root"/var/cache/debconf/*-old "$root"/var/log/*.log
tar -C "$root" -c . | $ENGINE import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$IMAGE" >/dev/null
echo "build-base-image: $IMAGE built in $(( $(date +%s) - start )) s" \
  "($($ENGINE image inspect "$IMAGE" --format '{{.Size}}') bytes)"
