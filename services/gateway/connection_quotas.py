"""Connection limits of one gateway, as Kafka's ``SocketServer.ConnectionQuotas``.

``max.connections`` bounds the client connections a gateway keeps open, ``max.connections.per.ip``
those from one address, and ``max.connections.per.ip.overrides`` sets other limits for named
hosts or addresses. A new connection over a limit is closed right after accept, before a byte
is read, so a client opening thousands of connections costs the gateway a counter each, not a
connection's buffers. All three are dynamic broker configs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from services.common.broker_config import INT_MAX
from services.common.logging import get_logger
from services.gateway import metrics

log = get_logger("gateway.connections")

MAX_CONNECTIONS = "max_connections"
MAX_CONNECTIONS_PER_IP = "max_connections_per_ip"
_LOG_EVERY_S = 1.0


class ConnectionQuotas:
    def __init__(
        self,
        max_connections: int = INT_MAX,
        max_per_ip: int = INT_MAX,
        ip_overrides: Mapping[str, int] | None = None,
    ) -> None:
        self.total = 0
        self._per_ip: dict[str, int] = {}
        self._rejected_unlogged = 0
        self._last_log = 0.0
        self.configure(max_connections, max_per_ip, ip_overrides or {})

    def configure(
        self, max_connections: int, max_per_ip: int, ip_overrides: Mapping[str, int]
    ) -> None:
        """New limits; connections already open stay (Kafka does not close them either)."""
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.ip_overrides = dict(ip_overrides)
        metrics.CONNECTION_LIMIT.labels(MAX_CONNECTIONS).set(max_connections)
        metrics.CONNECTION_LIMIT.labels(MAX_CONNECTIONS_PER_IP).set(max_per_ip)

    def limit_for(self, ip: str) -> int:
        return self.ip_overrides.get(ip, self.max_per_ip)

    def count(self, ip: str) -> int:
        return self._per_ip.get(ip, 0)

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False (and counted as rejected) when over a
        limit: the caller closes it."""
        if self.total >= self.max_connections:
            self._reject(ip, MAX_CONNECTIONS, self.max_connections)
            return False
        n = self._per_ip.get(ip, 0)
        limit = self.limit_for(ip)
        if n >= limit:
            self._reject(ip, MAX_CONNECTIONS_PER_IP, limit)
            return False
        self._per_ip[ip] = n + 1
        self.total += 1
        return True

    def release(self, ip: str) -> None:
        n = self._per_ip.get(ip, 0)
        if n == 0:
            return
        if n == 1:
            del self._per_ip[ip]
        else:
            self._per_ip[ip] = n - 1
        self.total -= 1

    def _reject(self, ip: str, reason: str, limit: int) -> None:
        metrics.CONNECTIONS_REJECTED.labels(reason).inc()
        self._rejected_unlogged += 1
        now = time.monotonic()
        if now - self._last_log >= _LOG_EVERY_S:
            log.info(
                "connection_rejected",
                peer_ip=ip,
                reason=reason,
                limit=limit,
                rejected_since_last_log=self._rejected_unlogged,
            )
            self._rejected_unlogged = 0
            self._last_log = now
