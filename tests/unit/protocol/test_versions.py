"""ApiKey, SUPPORTED_VERSIONS and the kio schema inventory they rely on."""

from __future__ import annotations

import pytest
from kio.schema.index import api_key_map

from services.common.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    UnsupportedVersionError,
    api_versions_entries,
    get_codec,
    is_flexible,
    is_supported,
    known_versions,
    precompile,
)
from services.common.protocol.schema import first_flexible_version, kio_class


def test_api_keys_match_kio() -> None:
    assert {k.value: k.name.lower() for k in ApiKey} == dict(api_key_map)


def test_supported_versions_table() -> None:
    assert SUPPORTED_VERSIONS == {
        ApiKey.PRODUCE: (3, 9),
        ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (0, 7),
        ApiKey.METADATA: (1, 12),
        ApiKey.API_VERSIONS: (0, 3),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (1, 6),
        ApiKey.DELETE_RECORDS: (0, 2),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
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
    for key, (low, high) in SUPPORTED_VERSIONS.items():
        assert set(range(low, high + 1)) <= set(known_versions(key)), key


@pytest.mark.parametrize("key", sorted(api_key_map))
def test_kio_versions_contiguous_and_flexibility_consistent(key: int) -> None:
    versions = known_versions(key)
    assert versions == tuple(range(versions[0], versions[-1] + 1))
    first = first_flexible_version(key)
    for version in versions:
        request = kio_class(key, version, "request")
        response = kio_class(key, version, "response")
        assert request.__flexible__ == response.__flexible__  # type: ignore[attr-defined]
        assert is_flexible(key, version) == request.__flexible__  # type: ignore[attr-defined]
        if first is not None:
            assert request.__flexible__ == (version >= first)  # type: ignore[attr-defined]


def test_is_supported_and_entries() -> None:
    assert is_supported(ApiKey.METADATA, 12)
    assert not is_supported(ApiKey.METADATA, 13)
    assert not is_supported(ApiKey.METADATA, 0)
    assert is_supported(ApiKey.JOIN_GROUP, 5)
    assert not is_supported(ApiKey.OFFSET_COMMIT, 9)  # KIP-848 member epochs: not served
    assert is_supported(ApiKey.SASL_HANDSHAKE, 1)
    assert not is_supported(ApiKey.SASL_HANDSHAKE, 2)
    assert not is_supported(4242, 0)
    assert is_supported(ApiKey.JOIN_GROUP, 5, {ApiKey.JOIN_GROUP: (0, 9)})
    entries = api_versions_entries()
    assert [e["api_key"] for e in entries] == sorted(int(k) for k in SUPPORTED_VERSIONS)
    assert entries[0] == {"api_key": 0, "min_version": 3, "max_version": 9}


def test_precompile_and_unknown_versions() -> None:
    assert precompile() >= 2 * sum(high - low + 1 for low, high in SUPPORTED_VERSIONS.values())
    assert get_codec(ApiKey.METADATA, 12, "response") is get_codec(ApiKey.METADATA, 12, "response")
    with pytest.raises(UnsupportedVersionError):
        get_codec(ApiKey.METADATA, 99, "request")
    with pytest.raises(UnsupportedVersionError):
        get_codec(4242, 0, "request")
