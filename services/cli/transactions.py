"""``kafka-py transactions list | describe | describe-producers | abort | find-hanging``
(kafka-transactions.sh's commands and columns; the last three in ``hanging_transactions``).

``list`` sends ListTransactions (v1) to a bootstrap server (``services.cli.wire``) (a gateway asks every
transaction coordinator) and names each id's coordinator as FindCoordinator answers it;
``describe --transactional-id ID`` sends DescribeTransactions. Filters as Kafka's tool:
``--state``, ``--producer-id``, ``--duration-filter``. A failure is one line and exit 1.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from services.cli import hanging_transactions as hanging
from services.cli.common import CliError
from services.cli.wire import bootstrap_exchange
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey

LIST_HEADER = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADER = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "transactions",
        help="list, describe and abort transactions (kafka-transactions.sh)",
        description="List, describe, find hanging and abort transactions, as "
        "kafka-transactions.sh does.",
    )
    common(p, False)
    commands = p.add_subparsers(dest="transactions_command", metavar="COMMAND")
    commands.required = True
    ls = commands.add_parser("list", help="list transactional ids")
    common(ls, False)
    ls.add_argument("--state", action="append", default=[], help="only in this state (repeat)")
    ls.add_argument("--producer-id", type=int, action="append", default=[], metavar="ID")
    ls.add_argument(
        "--duration-filter",
        type=int,
        default=-1,
        metavar="MS",
        help="only transactions open longer than this",
    )
    describe = commands.add_parser("describe", help="describe one transactional id")
    common(describe, False)
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    hanging.add_parsers(commands, common)


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    bootstrap = str(conf["bootstrap.servers"])
    timeout_s = args.request_timeout_ms / 1000.0

    def call(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return bootstrap_exchange(bootstrap, api_key, version, body, timeout_s)

    def coordinator(txn_id: str) -> str:
        r = call(ApiKey.FIND_COORDINATOR, 3, {"key": txn_id, "key_type": 1})
        return str(r["node_id"]) if r["error_code"] == 0 else "-1"

    if args.transactions_command == "describe-producers":
        producers = hanging.describe_producers(call, args.topic, args.partition)
        _table(hanging.PRODUCERS_HEADER, hanging.producer_rows(producers), out)
        return 0
    if args.transactions_command == "abort":
        hanging.abort(call, args)
        return 0
    if args.transactions_command == "find-hanging":
        _table(hanging.HANGING_HEADER, hanging.find_hanging(call, args), out)
        return 0
    if args.transactions_command == "list":
        r = call(
            ApiKey.LIST_TRANSACTIONS,
            1,
            {
                "state_filters": args.state,
                "producer_id_filters": args.producer_id,
                "duration_filter": args.duration_filter,
            },
        )
        if r["error_code"]:
            raise CliError(f"ListTransactions failed: {ErrorCode(r['error_code']).name}")
        if r["unknown_state_filters"]:
            raise CliError(f"unknown transaction states: {', '.join(r['unknown_state_filters'])}")
        rows = [
            (
                t["transactional_id"],
                coordinator(t["transactional_id"]),
                str(t["producer_id"]),
                t["transaction_state"],
            )  # fmt: skip
            for t in sorted(r["transaction_states"], key=lambda t: t["transactional_id"])
        ]
        _table(LIST_HEADER, rows, out)
        return 0
    txn_id = args.transactional_id
    (state,) = call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})[
        "transaction_states"
    ]
    if state["error_code"]:
        raise CliError(
            f"could not describe transactional id {txn_id}: {ErrorCode(state['error_code']).name}"
        )
    start = state["transaction_start_time"]
    partitions = ",".join(f"{t['topic']}-{p}" for t in state["topics"] for p in t["partitions"])
    row = (
        coordinator(txn_id),
        txn_id,
        str(state["producer_id"]),
        str(state["producer_epoch"]),
        state["transaction_state"],
        str(state["transaction_timeout"]),
        str(start) if start >= 0 else "None",
        str(int(time.time() * 1000) - start) if start >= 0 else "None",
        partitions,
    )
    _table(DESCRIBE_HEADER, [row], out)
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Kafka's prettyPrintTable: columns padded to their widest cell, tab-separated."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for r in (header, *rows):
        print("\t".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)
