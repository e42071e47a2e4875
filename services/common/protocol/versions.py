"""The API versions the gateway advertises in ApiVersions responses.

Edit `_ADVERTISED` to change what clients may use; each range is capped at the versions the kio
schemas cover. Ceilings chosen for the current gateway: Fetch stops at v12 (v13+ addresses topics
by id); Produce at v9 (first flexible version; v10+ adds leader-discovery tags); ListOffsets v0
(legacy_schemas: Sarama/Burrow send it) to v7 (MAX_TIMESTAMP; v8+ is tiered storage); Metadata
at v12 (v13 adds a top-level error code).
Group APIs: the classic protocol only - OffsetCommit and OffsetFetch stop at v8 (v9+ carry
KIP-848 member epochs), FindCoordinator at v4 (v5+ is KIP-890 / share groups), DescribeGroups at
v5 and ListGroups at v4 (later versions add KIP-1043 fields). Transactions: AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn stop at v3 (v4+ are KIP-890's batched/verify-only form and
TRANSACTION_ABORTABLE, v5 its epoch bump per transaction). WriteTxnMarkers v1 (v0 is gone from
the schemas) is what Admin.abortTransaction sends a partition's leader; DescribeProducers v0.
ACL APIs from v1 (v0 has no pattern type and is gone from the schemas) to v3.
DescribeClientQuotas and AlterClientQuotas v0-1 (v1 is the flexible form).
"""

from __future__ import annotations

from typing import Final

from .api_keys import ApiKey
from .schema import known_versions

_ADVERTISED: Final[dict[ApiKey, tuple[int, int]]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (0, 7),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.METADATA: (1, 12),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 8),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
}


def _cap(table: dict[ApiKey, tuple[int, int]]) -> dict[ApiKey, tuple[int, int]]:
    capped: dict[ApiKey, tuple[int, int]] = {}
    for key, (low, high) in table.items():
        known = known_versions(key)
        if not known:
            continue
        low, high = max(low, known[0]), min(high, known[-1])
        if low <= high:
            capped[key] = (low, high)
    return capped


SUPPORTED_VERSIONS: Final[dict[ApiKey, tuple[int, int]]] = _cap(_ADVERTISED)


def is_supported(
    api_key: int,
    api_version: int,
    supported: dict[ApiKey, tuple[int, int]] | None = None,
) -> bool:
    table = SUPPORTED_VERSIONS if supported is None else supported
    try:
        low, high = table[ApiKey(api_key)]
    except (KeyError, ValueError):
        return False
    return low <= api_version <= high


def api_versions_entries(
    supported: dict[ApiKey, tuple[int, int]] | None = None,
) -> list[dict[str, int]]:
    """The `api_keys` array of an ApiVersions response, sorted by api key."""
    table = SUPPORTED_VERSIONS if supported is None else supported
    return [
        {"api_key": int(key), "min_version": low, "max_version": high}
        for key, (low, high) in sorted(table.items())
    ]
