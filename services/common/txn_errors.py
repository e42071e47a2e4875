"""The transaction APIs' error answers, in each API's and version's shape (shared by the gateway,
which answers routing failures, and the transaction coordinator).

PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH to versions that predate it (InitProducerId
< 4, the others < 2), as Kafka does.
"""

from __future__ import annotations

from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey

Body = dict[str, Any]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

API_NAMES = {
    int(ApiKey.INIT_PRODUCER_ID): "InitProducerId",
    int(ApiKey.ADD_PARTITIONS_TO_TXN): "AddPartitionsToTxn",
    int(ApiKey.ADD_OFFSETS_TO_TXN): "AddOffsetsToTxn",
    int(ApiKey.END_TXN): "EndTxn",
    int(ApiKey.DESCRIBE_TRANSACTIONS): "DescribeTransactions",
    int(ApiKey.LIST_TRANSACTIONS): "ListTransactions",
}
# The first version that knows PRODUCER_FENCED (older ones get INVALID_PRODUCER_EPOCH).
_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
}


def transactional_ids(api_key: int, body: Body) -> list[str]:
    """The transactional ids a request names (none when empty)."""
    if api_key == ApiKey.DESCRIBE_TRANSACTIONS:
        return [t for t in body.get("transactional_ids") or () if t]
    if api_key == ApiKey.LIST_TRANSACTIONS:
        return []
    txn_id = body.get(
        "v3_and_below_transactional_id"
        if api_key == ApiKey.ADD_PARTITIONS_TO_TXN
        else "transactional_id"
    )
    return [txn_id] if isinstance(txn_id, str) and txn_id else []


def versioned(api_key: int, version: int, code: ErrorCode) -> ErrorCode:
    if code == ErrorCode.PRODUCER_FENCED and version < _FENCED_SINCE.get(ApiKey(api_key), 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def error_response(api_key: int, version: int, body: Body, code: ErrorCode) -> Body:
    """``code`` for everything ``body`` asks, in the API's shape."""
    code = versioned(api_key, version, code)
    if api_key == ApiKey.INIT_PRODUCER_ID:
        return {
            "throttle_time": 0,
            "error_code": int(code),
            "producer_id": NO_PRODUCER_ID,
            "producer_epoch": NO_PRODUCER_EPOCH,
        }
    if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
        return partitions_response(
            [
                ((t.get("name") or "", p), code)
                for t in body.get("v3_and_below_topics") or []
                for p in t.get("partitions") or []
            ]
        )
    if api_key == ApiKey.DESCRIBE_TRANSACTIONS:
        return {
            "throttle_time": 0,
            "transaction_states": [
                describe_entry(txn_id, code) for txn_id in body.get("transactional_ids") or ()
            ],
        }
    if api_key == ApiKey.LIST_TRANSACTIONS:
        return {
            "throttle_time": 0,
            "error_code": int(code),
            "unknown_state_filters": [],
            "transaction_states": [],
        }
    return {"throttle_time": 0, "error_code": int(code)}


def describe_entry(txn_id: str, code: ErrorCode, **values: Any) -> Body:
    """One DescribeTransactions answer (Kafka's defaults where ``values`` has none)."""
    return {
        "error_code": int(code),
        "transactional_id": txn_id,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": -1,
        "producer_id": NO_PRODUCER_ID,
        "producer_epoch": NO_PRODUCER_EPOCH,
        "topics": [],
        **values,
    }


def partitions_response(rows: list[tuple[tuple[str, int], ErrorCode]]) -> Body:
    topics: dict[str, list[Body]] = {}
    for (topic, partition), code in rows:
        topics.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": int(code)}
        )
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": parts} for name, parts in topics.items()
        ],
    }
