"""``kafka-py broker-api-versions``: what every broker (gateway) supports, printed as
kafka-broker-api-versions.sh prints it.

The brokers come from DescribeCluster; each is asked ApiVersions over its own connection with
kafka-py's protocol codec. "usable" is the highest version both the broker and this tool's codec
(Kafka's message specs through kio) know, as Kafka's NodeApiVersions computes it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from services.cli.common import CliError, kafka_error_text
from services.cli.wire import exchange
from services.common.protocol import ApiKey
from services.common.protocol.schema import known_versions

CLIENT_SOFTWARE = ("kafka-py-cli", "1.0")
# Keys only KRaft controllers serve: Kafka does not list them as UNSUPPORTED for a broker.
_CONTROLLER_ONLY = frozenset(
    {
        ApiKey.VOTE,
        ApiKey.BEGIN_QUORUM_EPOCH,
        ApiKey.END_QUORUM_EPOCH,
        ApiKey.FETCH_SNAPSHOT,
        ApiKey.BROKER_REGISTRATION,
        ApiKey.BROKER_HEARTBEAT,
        ApiKey.CONTROLLER_REGISTRATION,
        ApiKey.ASSIGN_REPLICAS_TO_DIRS,
        ApiKey.UPDATE_RAFT_VOTER,
    }
)


def api_name(key: int) -> str:
    """Kafka's ApiKeys name (``ListOffsets``) from the enum member (``LIST_OFFSETS``)."""
    try:
        member = ApiKey(key)
    except ValueError:
        return "UNKNOWN"
    return "".join(part.capitalize() for part in member.name.split("_"))


def _describe(key: int, low: int, high: int) -> str:
    name = api_name(key)
    text = f"{name}({key}): " + (str(low) if low == high else f"{low} to {high}")
    known = known_versions(key) if name != "UNKNOWN" else ()
    if not known:
        return text
    if known[-1] < low:
        return text + " [unusable: node too new]"
    if high < known[0]:
        return text + " [unusable: node too old]"
    return text + f" [usable: {min(known[-1], high)}]"


def format_versions(node: str, versions: Mapping[int, tuple[int, int]]) -> str:
    """``node -> (`` then one ``Name(key): min to max [usable: v]`` line per key, ``)``."""
    lines = {k: _describe(k, lo, hi) for k, (lo, hi) in versions.items()}
    for key in ApiKey:
        if key not in lines and key not in _CONTROLLER_ONLY:
            lines[int(key)] = f"{api_name(key)}({int(key)}): UNSUPPORTED"
    body = ",\n\t".join(lines[k] for k in sorted(lines))
    return f"{node} -> (\n\t{body}\n)"


def node_text(host: str, port: int, node_id: int, rack: str | None) -> str:
    """Kafka's ``Node.toString``."""
    return f"{host}:{port} (id: {node_id} rack: {rack if rack else 'null'})"


def fetch_api_versions(host: str, port: int, timeout_s: float) -> dict[int, tuple[int, int]]:
    """One ApiVersions v3 exchange (a v0 answer, KIP-511's fallback, is decoded too)."""
    name, version = CLIENT_SOFTWARE
    body = exchange(
        host,
        port,
        ApiKey.API_VERSIONS,
        3,
        {"client_software_name": name, "client_software_version": version},
        timeout_s,
    )
    if body["error_code"] not in (0, 35):  # 35: v0 fallback, still carries the versions
        raise CliError(f"ApiVersions to {host}:{port} failed with error {body['error_code']}")
    return {e["api_key"]: (e["min_version"], e["max_version"]) for e in body["api_keys"]}


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "broker-api-versions",
        help="API versions every broker supports (kafka-broker-api-versions.sh)",
        description="Print the API versions each broker (gateway) supports, as "
        "kafka-broker-api-versions.sh does.",
    )
    common(p, False)


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    timeout_s = args.request_timeout_ms / 1000.0
    admin = AdminClient(conf)
    try:
        cluster = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    except TimeoutError:
        raise CliError(f"no answer from the cluster within {timeout_s:g}s") from None
    for node in sorted(cluster.nodes, key=lambda n: n.id):
        versions = fetch_api_versions(node.host, node.port, timeout_s)
        print(
            format_versions(node_text(node.host, node.port, node.id, node.rack), versions), file=out
        )
    return 0
