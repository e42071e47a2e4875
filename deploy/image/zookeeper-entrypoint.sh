#!/bin/sh
# Writes $ZOO_CONF_DIR/zoo.cfg and $ZOO_DATA_DIR/myid from the environment the official
# `zookeeper` image reads (ZOO_MY_ID, ZOO_SERVERS, ZOO_TICK_TIME...), then runs the command.
set -eu
: "${ZOO_CONF_DIR:=/conf}" "${ZOO_DATA_DIR:=/data}" "${ZOO_DATA_LOG_DIR:=/datalog}"
: "${ZOO_MY_ID:=1}" "${ZOO_PORT:=2181}"
if [ ! -f "$ZOO_CONF_DIR/zoo.cfg" ]; then
  {
    echo "dataDir=$ZOO_DATA_DIR"
    echo "dataLogDir=$ZOO_DATA_LOG_DIR"
    echo "tickTime=${ZOO_TICK_TIME:-2000}"
    echo "initLimit=${ZOO_INIT_LIMIT:-5}"
    echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
    echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
    echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
    echo "admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-false}"
    echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr,ruok,mntr}"
    if [ -z "${ZOO_SERVERS:-}" ]; then
      echo "clientPort=$ZOO_PORT"
    else
      for server in $ZOO_SERVERS; do echo "$server"; done
    fi
    # further zoo.cfg lines, space-separated (secureClientPort, ssl.*), as the official image
    for entry in ${ZOO_CFG_EXTRA:-}; do echo "$entry"; done
  } >"$ZOO_CONF_DIR/zoo.cfg"
fi
[ -f "$ZOO_DATA_DIR/myid" ] || echo "$ZOO_MY_ID" >"$ZOO_DATA_DIR/myid"
exec "$@"
