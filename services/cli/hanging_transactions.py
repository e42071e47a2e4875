"""``kafka-py transactions describe-producers | abort | find-hanging`` (kafka-transactions.sh's
commands, options and columns), over the gateway's DescribeProducers (v0), WriteTxnMarkers
(v1, as Admin.abortTransaction), Metadata, ListTransactions and DescribeTransactions.

``find-hanging`` is Kafka's FindHangingTransactionsCommand: a partition's open transaction
(a producer with a current transaction start offset) older than ``--max-transaction-timeout``
minutes (by the producer's last timestamp) is hanging when no transaction coordinator knows
its producer id, or the coordinator's transaction does not include the partition.
Differences: producers are always described on the partition's leader (``--broker-id`` only
selects the partitions with a replica on that broker); ``describe-producers`` has no
``--broker-id``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from services.cli.common import CliError
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey

Call = Callable[[int, int, dict[str, Any]], dict[str, Any]]

PRODUCERS_HEADER = (
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
)
HANGING_HEADER = (
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
)
MAX_BATCH_SIZE = 500  # partitions per DescribeProducers, as Kafka's tool


@dataclass(frozen=True, slots=True)
class OpenTxn:
    topic: str
    partition: int
    producer: dict[str, Any]  # a DescribeProducers ProducerState


def add_parsers(commands: Any, common: Callable[[Any, bool], None]) -> None:
    dp = commands.add_parser(
        "describe-producers", help="describe the active producers of a topic partition"
    )
    common(dp, False)
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", type=int, required=True)
    abort = commands.add_parser(
        "abort", help="abort a hanging transaction (writes an ABORT marker)"
    )
    common(abort, False)
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, metavar="OFFSET")
    abort.add_argument("--producer-id", type=int, metavar="ID")
    abort.add_argument("--producer-epoch", type=int, metavar="EPOCH")
    abort.add_argument("--coordinator-epoch", type=int, metavar="EPOCH")
    fh = commands.add_parser("find-hanging", help="find hanging transactions")
    common(fh, False)
    fh.add_argument("--broker-id", type=int, help="search the partitions with a replica here")
    fh.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        metavar="MINUTES",
        help="maximum transaction timeout in minutes to limit the scope of the search (15)",
    )
    fh.add_argument("--topic", help="topic name to limit the search to")
    fh.add_argument("--partition", type=int, help="partition number (needs --topic)")


def describe_producers(call: Call, topic: str, partition: int) -> list[dict[str, Any]]:
    """The active producers of ``topic``-``partition`` (its leader's producer state)."""
    (part,) = _describe(call, [(topic, partition)])
    code = part["error_code"]
    if code:
        raise CliError(
            f"Failed to describe producers for partition {topic}-{partition} on leader: "
            f"{ErrorCode(code).name}"
        )
    return list(part["active_producers"])


def producer_rows(producers: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    return [
        (
            str(p["producer_id"]),
            str(p["producer_epoch"]),
            str(p["coordinator_epoch"]),
            str(p["last_sequence"]),
            str(p["last_timestamp"]),
            str(p["current_txn_start_offset"]) if p["current_txn_start_offset"] >= 0 else "None",
        )
        for p in producers
    ]


def abort(call: Call, args: Any) -> None:
    """Kafka's AbortTransactionCommand: by ``--start-offset`` (the producer whose open
    transaction starts there) or by ``--producer-id/--producer-epoch/--coordinator-epoch``."""
    topic, partition = args.topic, args.partition
    if args.start_offset is None and args.producer_id is None:
        raise CliError(
            "The transaction to abort must be identified either with --start-offset (for "
            "brokers on 3.0 or above) or with --producer-id, --producer-epoch, and "
            "--coordinator-epoch (for older brokers)"
        )
    if args.start_offset is not None:
        found = [
            p
            for p in describe_producers(call, topic, partition)
            if p["current_txn_start_offset"] == args.start_offset
        ]
        if not found:
            raise CliError(
                f"Could not find any open transactions starting at offset {args.start_offset} "
                f"on partition {topic}-{partition}"
            )
        pid, epoch = found[0]["producer_id"], found[0]["producer_epoch"]
        coordinator_epoch = max(found[0]["coordinator_epoch"], 0)
    else:
        if args.producer_epoch is None:
            raise CliError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise CliError("Missing required argument --coordinator-epoch")
        pid, epoch = args.producer_id, args.producer_epoch
        # a producer that hung before its first marker shows -1: Kafka's tool uses 0
        coordinator_epoch = max(args.coordinator_epoch, 0)
    r = call(
        ApiKey.WRITE_TXN_MARKERS,
        1,
        {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "transaction_result": False,
                    "topics": [{"name": topic, "partition_indexes": [partition]}],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        },
    )
    codes = [p["error_code"] for m in r["markers"] for t in m["topics"] for p in t["partitions"]]
    if codes != [0]:
        name = ErrorCode(codes[0]).name if codes else "no answer for the partition"
        raise CliError(
            f"Failed to abort transaction (producer id {pid}, epoch {epoch}, coordinator "
            f"epoch {coordinator_epoch}) on {topic}-{partition}: {name}"
        )


def find_hanging(call: Call, args: Any, now_ms: int | None = None) -> list[tuple[str, ...]]:
    if args.topic is None and args.broker_id is None:
        raise CliError(
            "The `find-hanging` command requires either --topic or --broker-id to limit the "
            "scope of the search"
        )
    if args.partition is not None and args.topic is None:
        raise CliError("The --partition argument requires --topic to be provided")
    partitions = _partitions_to_search(call, args.topic, args.partition, args.broker_id)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    max_timeout_ms = args.max_transaction_timeout * 60_000
    candidates: list[OpenTxn] = []
    for batch in _batches(partitions, MAX_BATCH_SIZE):
        for part in _describe(call, batch):
            if part["error_code"]:
                raise CliError(
                    f"Failed to describe producers for {len(batch)} partitions: "
                    f"{ErrorCode(part['error_code']).name} on {part['topic']}-"
                    f"{part['partition_index']}"
                )
            for p in part["active_producers"]:
                if (
                    p["current_txn_start_offset"] >= 0
                    and now - p["last_timestamp"] > max_timeout_ms
                ):
                    candidates.append(OpenTxn(part["topic"], part["partition_index"], p))
    hanging = _hanging(call, candidates)
    return [
        (
            t.topic,
            str(t.partition),
            str(t.producer["producer_id"]),
            str(t.producer["producer_epoch"]),
            str(t.producer["coordinator_epoch"]),
            str(t.producer["current_txn_start_offset"]),
            str(t.producer["last_timestamp"]),
            str((now - t.producer["last_timestamp"]) // 60_000),
        )
        for t in hanging
    ]


def _hanging(call: Call, candidates: list[OpenTxn]) -> list[OpenTxn]:
    """Kafka's filterHangingTransactions: no coordinator knows the producer id, or its
    transaction does not (or no longer) include the partition."""
    if not candidates:
        return []
    pids = sorted({c.producer["producer_id"] for c in candidates})
    listed = call(
        ApiKey.LIST_TRANSACTIONS,
        1,
        {"state_filters": [], "producer_id_filters": pids, "duration_filter": -1},
    )
    if listed["error_code"]:
        raise CliError(
            f"Failed to list transactions for {len(pids)} producers: "
            f"{ErrorCode(listed['error_code']).name}"
        )
    txn_ids = {
        t["producer_id"]: t["transactional_id"]
        for t in listed["transaction_states"]
        if t["producer_id"] in pids
    }
    described: dict[str, set[tuple[str, int]] | None] = {}
    if txn_ids:
        states = call(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": sorted(set(txn_ids.values()))}
        )["transaction_states"]
        for s in states:
            code = s["error_code"]
            if code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                described[s["transactional_id"]] = None
            elif code:
                raise CliError(
                    f"Failed to describe {len(states)} transactions: {ErrorCode(code).name}"
                )
            else:
                described[s["transactional_id"]] = {
                    (t["topic"], p) for t in s["topics"] for p in t["partitions"]
                }
    out = []
    for c in candidates:
        txn_id = txn_ids.get(c.producer["producer_id"])
        in_txn = described.get(txn_id) if txn_id is not None else None
        if in_txn is None or (c.topic, c.partition) not in in_txn:
            out.append(c)
    return out


def _describe(call: Call, partitions: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """DescribeProducers for ``partitions``: each partition's answer with its ``topic``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    r = call(
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]},
    )
    return [{**p, "topic": t["name"]} for t in r["topics"] for p in t["partitions"]]


def _partitions_to_search(
    call: Call, topic: str | None, partition: int | None, broker_id: int | None
) -> list[tuple[str, int]]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    r = call(
        ApiKey.METADATA,
        9,
        {
            "topics": None if topic is None else [{"name": topic}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    out = []
    for t in r["topics"]:
        if t["error_code"]:
            raise CliError(
                f"Failed to describe topic {t['name']}: {ErrorCode(t['error_code']).name}"
            )
        for p in t["partitions"]:
            if broker_id is None or broker_id in p["replica_nodes"]:
                out.append((t["name"], p["partition_index"]))
    return sorted(out)


def _batches(items: Sequence[tuple[str, int]], size: int) -> Iterator[Sequence[tuple[str, int]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
