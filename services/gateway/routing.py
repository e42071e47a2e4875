"""Which gateway a client is told leads a partition.

Every gateway can serve every partition; the "leader" in Metadata only decides which gateway
a client sends a partition's traffic to. Leaders are spread over the gateways in the client's
zone so traffic stays in-zone:

* client zone: a ``zone=<z>``, ``rack=<z>`` or ``client.rack=<z>`` token in the request's
  ``client.id`` (tokens separated by anything but ``[A-Za-z0-9._-]``, e.g.
  ``client.id=orders-app;zone=eu-west-1a``); otherwise the zone of the gateway the client is
  connected to (``broker.rack``);
* candidates: the live gateways in that zone, sorted by id; all gateways when none is in
  that zone (or no zone is known);
* leader of (topic, partition) = ``candidates[(crc32(topic) + partition) % len(candidates)]``:
  stable across requests and gateways, and consecutive partitions land on consecutive gateways.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence

from services.common.zk.layout import Endpoint

_ZONE_HINT = re.compile(r"(?:^|[^A-Za-z0-9_.\-])(?:client\.rack|zone|rack)=([A-Za-z0-9_.:\-]+)")


def client_zone(client_id: str | None, default: str | None) -> str | None:
    """The zone hinted in ``client_id``, else ``default`` (the connected gateway's zone)."""
    if client_id:
        m = _ZONE_HINT.search(client_id)
        if m:
            return m.group(1)
    return default


def candidates(gateways: Mapping[int, Endpoint], zone: str | None) -> list[int]:
    """Gateway ids that may lead partitions for a client in ``zone``."""
    if zone is not None:
        in_zone = sorted(i for i, ep in gateways.items() if ep.rack == zone)
        if in_zone:
            return in_zone
    return sorted(gateways)


def topic_hash(topic: str) -> int:
    return zlib.crc32(topic.encode())


def leader_for(topic_hash_value: int, partition: int, ids: Sequence[int]) -> int:
    return ids[(topic_hash_value + partition) % len(ids)]
