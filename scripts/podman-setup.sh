#!/usr/bin/env bash
# Writes podman's containers.conf for machines like the project's (Debian 12 VMs, root, hybrid
# cgroups): crun refuses those cgroups, so runc; cgroupfs (no systemd session); a file events
# logger (no journald); and default ulimits root can grant (else every start fails on setrlimit).
# Idempotent: rewrites the file only when its content differs. CONTAINERS_CONF_DIR overrides
# where it goes (default /etc/containers when root, ~/.config/containers otherwise).
set -euo pipefail

if [ -n "${CONTAINERS_CONF_DIR:-}" ]; then
  dir=$CONTAINERS_CONF_DIR
elif [ "$(id -u)" -eq 0 ]; then
  dir=/etc/containers
else
  dir=${XDG_CONFIG_HOME:-$HOME/.config}/containers
fi
conf=$dir/containers.conf
want=$(cat <<'CONF'
# written by kafka-py scripts/podman-setup.sh
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
)
if [ -f "$conf" ] && [ "$(cat "$conf")" = "$want" ]; then
  exit 0
fi
if [ -f "$conf" ] && ! grep -q "kafka-py scripts/podman-setup.sh" "$conf"; then
  echo "podman-setup: $conf exists and was not written by kafka-py; leaving it alone" >&2
  echo "podman-setup: it needs: runtime=runc, cgroup_manager=cgroupfs, events_logger=file, default_ulimits" >&2
  exit 0
fi
mkdir -p "$dir"
printf '%s\n' "$want" >"$conf"
echo "podman-setup: wrote $conf"
