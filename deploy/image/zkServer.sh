#!/bin/sh
# `zkServer.sh start-foreground` as the official image runs it, on Debian's package.
set -eu
[ "${1:-start-foreground}" = start-foreground ] || { echo "only start-foreground" >&2; exit 2; }
exec java ${JVMFLAGS:--Xmx256m} -Dzookeeper.log.dir=/tmp \
  -cp "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/*" \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "${ZOO_CONF_DIR:-/conf}/zoo.cfg"
