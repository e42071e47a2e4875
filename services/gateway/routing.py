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

Broker ids (``broker_endpoints``): replica and ISR lists name storage node ids, so every live
storage node is a broker a client can address. A gateway keeps its own id; a storage id that is
no gateway's stands for a gateway in that storage node's zone (``candidates(gateways,
rack)[id % n]``, any gateway when its zone has none): its address and rack are that gateway's.
Whatever a client sends to such an id is served by a gateway like any request, and a
preferred read replica (KIP-392) is an id whose broker is in the client's zone
(``preferred_read_replica``). librdkafka before 2.9 finds a broker of a Metadata answer by its
address when the id is new to it and renames that connection to the new id (fixed by
librdkafka #4557), and kafkajs hands its seed connection to every id at that address, so
brokers sharing an address break them: clients not known to cope (``shares_addresses``) are
told of the gateways only, as before.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping, Sequence

from services.common.zk.layout import Endpoint

_RDKAFKA_VERSION = re.compile(r"rdkafka\D*(\d+)\.(\d+)")
_RDKAFKA_SHARED_ADDRESSES = (2, 9)  # first librdkafka telling brokers apart by id alone
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


def broker_endpoints(
    gateways: Mapping[int, Endpoint], storage_racks: Mapping[int, str | None]
) -> dict[int, Endpoint]:
    """The brokers clients are told of: every gateway, and every storage node (id -> rack)
    whose id is no gateway's, at the address of a gateway in its zone."""
    out = dict(gateways)
    if not gateways:
        return out
    for node_id, rack in storage_racks.items():
        if node_id in out:
            continue
        ids = candidates(gateways, rack)
        gw = gateways[ids[node_id % len(ids)]]
        out[node_id] = Endpoint(node_id, gw.host, gw.port, gw.rack)
    return out


def storage_served_by(
    gateways: Mapping[int, Endpoint], storage_racks: Mapping[int, str | None], gateway_id: int
) -> list[int]:
    """The storage nodes whose broker id ``broker_endpoints`` places at gateway ``gateway_id``
    (its own id included): every storage node is served by exactly one live gateway."""
    out = []
    for node_id, rack in sorted(storage_racks.items()):
        if node_id in gateways:
            if node_id == gateway_id:
                out.append(node_id)
            continue
        ids = candidates(gateways, rack)
        if ids and ids[node_id % len(ids)] == gateway_id:
            out.append(node_id)
    return out


def preferred_read_replica(
    client_rack: str | None,
    own_rack: str | None,
    replicas: Iterable[int],
    brokers: Mapping[int, Endpoint],
) -> int:
    """KIP-392 for a consumer in ``client_rack``: the first of ``replicas`` (in-sync ones)
    whose broker is in that zone, or -1 (fetch here) when this gateway is already in it or
    no replica's broker is."""
    if not client_rack or client_rack == own_rack:
        return -1
    for r in replicas:
        ep = brokers.get(r)
        if ep is not None and ep.rack == client_rack:
            return r
    return -1


def shares_addresses(software_name: str, software_version: str) -> bool:
    """Whether a client (by ApiVersions v3+ client_software_name/version) is known to keep
    brokers that share a host:port apart. Not librdkafka before 2.9 (name ``librdkafka`` and
    its version, or a binding's ``<version>-rdkafka-<version>``; one that says rdkafka without
    a version counts as old), nor a client that does not say: kafkajs 2.2.4 (ApiVersions v2)
    hands its seed broker's connection to every id at the seed's address and then fails
    produce and DeleteRecords, and aiokafka (v0) is untested with it. The Java client and
    kafka-python say who they are and key brokers by id."""
    if not software_name:
        return False
    text = f"{software_name} {software_version}".lower()
    if "rdkafka" not in text:
        return True
    m = _RDKAFKA_VERSION.search(text)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= _RDKAFKA_SHARED_ADDRESSES
