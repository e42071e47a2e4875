"""The transaction APIs a transaction coordinator answers: forwarded Kafka request bodies
(codec dicts) in, response bodies out, shaped per version as Kafka's KafkaApis does.

InitProducerId (with a transactional id), AddPartitionsToTxn (v0-3: one transactional id),
AddOffsetsToTxn and EndTxn; errors in each API's shape (``services.common.txn_errors``).
Nothing raises out of ``handle``: an unexpected failure is logged and answered
UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from services.common.coordinator.forward import fit
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey, message_spec
from services.common.txn_errors import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
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
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
}


class ShardLookup(Protocol):
    def partition_of(self, key: str) -> int | None: ...

    def shard(self, partition: int | None) -> TxnShard | ErrorCode: ...


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


_HANDLERS: dict[int, Handler] = {
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets,
    ApiKey.END_TXN: _end_txn,
}
