#!/usr/bin/env bash
# Installs what kafka-py needs on a Debian machine and is not there yet:
# Java + ZooKeeper (Debian packages), kcat, Node.js/npm and the npm test clients,
# podman/buildah/runc/debootstrap for `make image` and kube-sim (plus podman's configuration).
# Burrow (lag monitoring, tested against a local cluster), Prometheus (promtool checks the alert rules),
# Chromium (the web console's page is tested in it, headless).
# Idempotent: every step checks first, so a second run costs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)  # kube-sim cuts a zone off with an nftables table
command -v Burrow >/dev/null 2>&1 || need_apt+=(burrow)  # consumer lag monitor (Sarama client), issue 18
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)  # promtool checks the shipped alert rules
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium fonts-dejavu-core)  # the console's browser test

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  echo "installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ -f tests/clients/node/package.json ] && [ ! -d tests/clients/node/node_modules ]; then
  echo "installing npm test clients"
  npm ci --prefix tests/clients/node --no-audit --no-fund --loglevel=error
fi

# podman needs runc, cgroupfs, a file events logger and fixed ulimits on these machines
./scripts/podman-setup.sh
