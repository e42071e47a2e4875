"""``kafka-py log-dirs --describe``: the log dirs of storage nodes and the replicas in them,
printed as kafka-log-dirs.sh prints them.

The brokers come from DescribeCluster; each distinct gateway address is asked DescribeLogDirs
(kafka-py's protocol codec: confluent-kafka has no DescribeLogDirs). A gateway answers for the
storage nodes it serves and names each dir ``storage-<id>:<path>`` (docs/decisions.md), so the
answers are regrouped by storage id and printed with the dirs' own paths.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from services.cli.common import CliError, UsageError, kafka_error_text
from services.cli.wire import exchange
from services.common.errors import ErrorCode
from services.common.log_dir_names import parse_dir_name
from services.common.protocol import ApiKey

DESCRIBE_LOG_DIRS_VERSION = 4
# Java exception class names kafka-log-dirs.sh prints for a dir's error
_EXCEPTIONS = {
    ErrorCode.KAFKA_STORAGE_ERROR: "org.apache.kafka.common.errors.KafkaStorageException",
}


@dataclass(slots=True)
class ReplicaDir:
    size: int
    offset_lag: int
    is_future: bool = False


@dataclass(slots=True)
class LogDir:
    path: str
    error_code: int
    total_bytes: int = -1
    usable_bytes: int = -1
    replicas: dict[tuple[str, int], ReplicaDir] = field(default_factory=dict)


def parse_answer(body: dict[str, Any]) -> dict[int, list[LogDir]]:
    """A DescribeLogDirs answer of a gateway, by storage id."""
    out: dict[int, list[LogDir]] = {}
    for r in body.get("results") or []:
        named = parse_dir_name(r["log_dir"])
        if named is None:
            continue
        broker, path = named
        d = LogDir(path, r["error_code"], r.get("total_bytes", -1), r.get("usable_bytes", -1))
        for t in r["topics"]:
            for p in t["partitions"]:
                d.replicas[(t["name"], p["partition_index"])] = ReplicaDir(
                    p["partition_size"], p["offset_lag"], p["is_future_key"]
                )
        out.setdefault(broker, []).append(d)
    return out


def describe_log_dirs(
    addresses: Iterable[tuple[str, int]], timeout_s: float
) -> dict[int, list[LogDir]]:
    """Every storage node's log dirs, asking each gateway address once."""
    out: dict[int, list[LogDir]] = {}
    for host, port in dict.fromkeys(addresses):
        body = exchange(
            host,
            port,
            ApiKey.DESCRIBE_LOG_DIRS,
            DESCRIBE_LOG_DIRS_VERSION,
            {"topics": None},
            timeout_s,
        )
        if body.get("error_code"):
            raise CliError(
                f"DescribeLogDirs to {host}:{port} failed with error {body['error_code']}"
            )
        for broker, dirs in parse_answer(body).items():
            out.setdefault(broker, dirs)
    return out


def cluster_addresses(
    conf: dict[str, Any], timeout_s: float
) -> tuple[list[int], list[tuple[str, int]]]:
    """Broker ids and the distinct addresses serving them (DescribeCluster)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(conf)
    try:
        cluster = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    except TimeoutError:
        raise CliError(f"no answer from the cluster within {timeout_s:g}s") from None
    nodes = sorted(cluster.nodes, key=lambda n: n.id)
    return [n.id for n in nodes], list(dict.fromkeys((n.host, n.port) for n in nodes))


def _error_text(code: int) -> str | None:
    if code == 0:
        return None
    try:
        ec = ErrorCode(code)
    except ValueError:
        return f"error code {code}"
    return _EXCEPTIONS.get(ec, ec.name)


def format_json(dirs: dict[int, list[LogDir]], brokers: list[int], topics: set[str] | None) -> str:
    """Kafka's LogDirsCommand JSON (key order as Kafka prints it)."""
    out = []
    for broker in brokers:
        log_dirs = []
        for d in dirs.get(broker, []):
            partitions = [
                {
                    "partition": f"{t}-{p}",
                    "size": r.size,
                    "offsetLag": r.offset_lag,
                    "isFuture": r.is_future,
                }
                for (t, p), r in sorted(d.replicas.items())
                if topics is None or t in topics
            ]
            log_dirs.append(
                {"logDir": d.path, "error": _error_text(d.error_code), "partitions": partitions}
            )
        out.append({"broker": broker, "logDirs": log_dirs})
    return json.dumps({"version": 1, "brokers": out}, separators=(",", ":"))


def _id_list(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(
            f"{what} must be a comma-separated list of broker ids, got {text!r}"
        ) from None


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "log-dirs",
        help="log dirs of storage nodes and the replicas in them (kafka-log-dirs.sh)",
        description="Describe the log dirs of storage nodes, as kafka-log-dirs.sh does.",
    )
    common(p, False)
    p.add_argument("--describe", action="store_true", required=True, help="describe log dirs")
    p.add_argument("--topic-list", metavar="T1,T2", help="only these topics (default: all)")
    p.add_argument("--broker-list", metavar="ID1,ID2", help="only these brokers (default: all)")


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    timeout_s = args.request_timeout_ms / 1000.0
    ids, addresses = cluster_addresses(conf, timeout_s)
    dirs = describe_log_dirs(addresses, timeout_s)
    existing = sorted(set(ids) | set(dirs))
    if args.broker_list:
        brokers = _id_list(args.broker_list, "--broker-list")
        missing = [b for b in brokers if b not in existing]
        if missing:
            raise CliError(
                "The given brokers do not exist from --broker-list: "
                f"{','.join(map(str, missing))}. Current existent brokers: "
                f"{','.join(map(str, existing))}"
            )
    else:
        brokers = sorted(dirs)  # the storage nodes: brokers that have log dirs
    topics = (
        {t.strip() for t in args.topic_list.split(",") if t.strip()} if args.topic_list else None
    )
    print("Querying brokers for log directories information", file=out)
    print(
        f"Received log directory information from brokers {','.join(map(str, brokers))}",
        file=out,
    )
    print(format_json(dirs, brokers, topics), file=out)
    return 0
