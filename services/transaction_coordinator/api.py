"""The transaction APIs a transaction coordinator answers: forwarded Kafka request bodies
(codec dicts) in, response bodies out, shaped per version as Kafka's KafkaApis does.

InitProducerId (with a transactional id), AddPartitionsToTxn (v0-3: one transactional id;
v4: batched, which here only carries the gateway's verify-only checks of KIP-890 part 1 - the
gateway does not advertise v4 to clients), AddOffsetsToTxn and EndTxn; errors in each API's shape (``services.common.txn_errors``).
Nothing raises out of ``handle``: an unexpected failure is logged and answered
UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from services.common.coordinator.forward import fit
from services.common.errors import ErrorCode
from services.common.internal_topics.transaction_state import TxnState
from services.common.logging import get_logger
from services.common.protocol import ApiKey, message_spec
from services.common.txn_errors import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    describe_entry,
    error_response,
    partitions_response,
    versioned,
)
from services.transaction_coordinator.transactions import TxnShard

log = get_logger("transaction_coordinator.api")

Body = dict[str, Any]

# Versions this module answers (what the gateway advertises).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
}


class ShardLookup(Protocol):
    def partition_of(self, key: str) -> int | None: ...

    def shard(self, partition: int | None) -> TxnShard | ErrorCode: ...

    def loaded_shards(self) -> list[TxnShard]: ...


class OffsetsPartitions(Protocol):
    def __call__(self, group_id: str) -> int | None:
        """The ``__consumer_offsets`` partition of ``group_id`` (None: no such topic yet)."""
        ...


Handler = Callable[[ShardLookup, OffsetsPartitions, int, Body], Coroutine[Any, Any, Body]]


def supports(api_key: int, api_version: int) -> bool:
    low, high = SUPPORTED_VERSIONS.get(api_key, (0, -1))
    return low <= api_version <= high


async def handle(
    shards: ShardLookup,
    offsets_partition: OffsetsPartitions,
    api_key: int,
    version: int,
    body: Body,
) -> Body:
    if api_key not in _HANDLERS:
        raise ValueError(f"api {api_key} is not a transaction coordinator request")
    if not supports(api_key, version):
        return error_response(api_key, version, body, ErrorCode.UNSUPPORTED_VERSION)
    try:
        response = await _HANDLERS[api_key](shards, offsets_partition, version, body)
    except Exception as exc:
        log.exception("transaction_request_failed", api_key=api_key, error=repr(exc))
        return error_response(api_key, version, body, ErrorCode.UNKNOWN_SERVER_ERROR)
    return fit(message_spec(api_key, version, "response"), response)


def _shard(shards: ShardLookup, txn_id: str) -> TxnShard | ErrorCode:
    return shards.shard(shards.partition_of(txn_id))


async def _init_producer_id(
    shards: ShardLookup, _: OffsetsPartitions, version: int, body: Body
) -> Body:
    txn_id = body.get("transactional_id")
    if not txn_id:
        return error_response(ApiKey.INIT_PRODUCER_ID, version, body, ErrorCode.INVALID_REQUEST)
    shard = _shard(shards, txn_id)
    if isinstance(shard, ErrorCode):
        return error_response(ApiKey.INIT_PRODUCER_ID, version, body, shard)
    result = await shard.init_producer_id(
        txn_id,
        int(body.get("transaction_timeout") or 0),
        int(body.get("producer_id", NO_PRODUCER_ID)),
        int(body.get("producer_epoch", NO_PRODUCER_EPOCH)),
    )
    if result.error != ErrorCode.NONE:
        return error_response(ApiKey.INIT_PRODUCER_ID, version, body, result.error)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "producer_id": result.producer_id,
        "producer_epoch": result.producer_epoch,
    }


async def _add_partitions(
    shards: ShardLookup, _: OffsetsPartitions, version: int, body: Body
) -> Body:
    key = ApiKey.ADD_PARTITIONS_TO_TXN
    if version >= 4:
        return _verify_partitions(shards, body)
    txn_id = body.get("v3_and_below_transactional_id") or ""
    shard = _shard(shards, txn_id)
    if isinstance(shard, ErrorCode):
        return error_response(key, version, body, shard)
    wanted = [
        (t.get("name") or "", int(p))
        for t in body.get("v3_and_below_topics") or []
        for p in t.get("partitions") or []
    ]
    code = await shard.add_partitions(
        txn_id,
        int(body.get("v3_and_below_producer_id", NO_PRODUCER_ID)),
        int(body.get("v3_and_below_producer_epoch", NO_PRODUCER_EPOCH)),
        wanted,
    )
    code = versioned(key, version, code)
    return partitions_response([(tp, code) for tp in dict.fromkeys(wanted)])


def _verify_partitions(shards: ShardLookup, body: Body) -> Body:
    """AddPartitionsToTxn v4: per transaction, verify-only (adding through v4 is a broker's
    batching of client requests, which the gateway never does: INVALID_REQUEST)."""
    results = []
    for txn in body.get("transactions") or ():
        txn_id = txn.get("transactional_id") or ""
        wanted = [
            (t.get("name") or "", int(p))
            for t in txn.get("topics") or []
            for p in t.get("partitions") or []
        ]
        shard = _shard(shards, txn_id)
        if not txn.get("verify_only"):
            codes = dict.fromkeys(wanted, ErrorCode.INVALID_REQUEST)
        elif isinstance(shard, ErrorCode):
            codes = dict.fromkeys(wanted, shard)
        else:
            codes = shard.verify_partitions(
                txn_id,
                int(txn.get("producer_id", NO_PRODUCER_ID)),
                int(txn.get("producer_epoch", NO_PRODUCER_EPOCH)),
                wanted,
            )
        topics: dict[str, list[Body]] = {}
        for (topic, partition), code in codes.items():
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "partition_error_code": int(code)}
            )
        results.append(
            {
                "transactional_id": txn_id,
                "topic_results": [
                    {"name": t, "results_by_partition": ps} for t, ps in topics.items()
                ],
            }
        )
    return {"throttle_time": 0, "error_code": 0, "results_by_transaction": results}


async def _add_offsets(
    shards: ShardLookup, offsets_partition: OffsetsPartitions, version: int, body: Body
) -> Body:
    key = ApiKey.ADD_OFFSETS_TO_TXN
    txn_id = body.get("transactional_id") or ""
    shard = _shard(shards, txn_id)
    if isinstance(shard, ErrorCode):
        return error_response(key, version, body, shard)
    partition = offsets_partition(body.get("group_id") or "")
    if partition is None:
        return error_response(key, version, body, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code = await shard.add_partitions(
        txn_id,
        int(body.get("producer_id", NO_PRODUCER_ID)),
        int(body.get("producer_epoch", NO_PRODUCER_EPOCH)),
        [("__consumer_offsets", partition)],
    )
    return error_response(key, version, body, code)


async def _end_txn(shards: ShardLookup, _: OffsetsPartitions, version: int, body: Body) -> Body:
    key = ApiKey.END_TXN
    txn_id = body.get("transactional_id") or ""
    shard = _shard(shards, txn_id)
    if isinstance(shard, ErrorCode):
        return error_response(key, version, body, shard)
    code = await shard.end_txn(
        txn_id,
        int(body.get("producer_id", NO_PRODUCER_ID)),
        int(body.get("producer_epoch", NO_PRODUCER_EPOCH)),
        bool(body.get("committed")),
    )
    return error_response(key, version, body, code)


async def _describe(shards: ShardLookup, _: OffsetsPartitions, version: int, body: Body) -> Body:
    """Kafka's handleDescribeTransactions: each id's state, or why not."""
    out = []
    for txn_id in body.get("transactional_ids") or ():
        shard = _shard(shards, txn_id)
        entry = None if isinstance(shard, ErrorCode) else shard.entries.get(txn_id)
        if isinstance(shard, ErrorCode):
            out.append(describe_entry(txn_id, shard))
        elif entry is None:
            out.append(describe_entry(txn_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
        else:
            rec = entry.record
            topics: dict[str, list[int]] = {}
            for topic, partition in sorted(rec.partitions):
                topics.setdefault(topic, []).append(partition)
            out.append(
                describe_entry(
                    txn_id,
                    ErrorCode.NONE,
                    transaction_state=rec.state.kafka_name,
                    transaction_timeout=rec.timeout_ms,
                    transaction_start_time=rec.start_ms,
                    producer_id=rec.producer_id,
                    producer_epoch=rec.producer_epoch,
                    topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()],
                )
            )
    return {"throttle_time": 0, "transaction_states": out}


async def _list(shards: ShardLookup, _: OffsetsPartitions, version: int, body: Body) -> Body:
    """Kafka's handleListTransactions over the loaded shards: state, producer id and (v1)
    duration filters; unknown state names are reported."""
    known = {s.kafka_name: s for s in TxnState}
    wanted = list(body.get("state_filters") or ())
    states = {known[s] for s in wanted if s in known}
    pids = set(body.get("producer_id_filters") or ())
    duration = int(body.get("duration_filter", -1)) if version >= 1 else -1
    out = []
    for shard in shards.loaded_shards():
        now = shard.clock()
        for txn_id, entry in shard.entries.items():
            rec = entry.record
            if (wanted and rec.state not in states) or (pids and rec.producer_id not in pids):
                continue
            if duration >= 0 and (rec.start_ms < 0 or now - rec.start_ms < duration):
                continue
            out.append(
                {
                    "transactional_id": txn_id,
                    "producer_id": rec.producer_id,
                    "transaction_state": rec.state.kafka_name,
                }
            )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "unknown_state_filters": [s for s in wanted if s not in known],
        "transaction_states": out,
    }


_HANDLERS: dict[int, Handler] = {
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets,
    ApiKey.END_TXN: _end_txn,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe,
    ApiKey.LIST_TRANSACTIONS: _list,
}
