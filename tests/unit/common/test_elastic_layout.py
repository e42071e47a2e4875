"""Elastic-storage znode payloads: usage reports, the autoscaler's state, the local scale spec."""

from __future__ import annotations

from services.common.zk.elastic import AutoscalerState, ScaleSpec, StorageUsage


def test_usage_round_trip() -> None:
    u = StorageUsage(2, 300, 1000, 55, 1234, 2)
    assert StorageUsage.from_json(u.to_json()) == u
    assert u.used_percent == 30.0
    assert StorageUsage.from_json(b"not json") is None
    assert StorageUsage.from_json(b'{"broker": "x"}') is None


def test_usage_znode_is_totals_only_whatever_the_replica_count() -> None:
    """At 10,000 replicas the report stays the size it is at 1 (it once listed every replica:
    ~400 KB written every 5 s per node); replica sizes are asked over gRPC when planning."""
    small = StorageUsage(0, 10**12, 4 * 10**12, 10**11, 1_700_000_000_000, 1).to_json()
    large = StorageUsage(0, 10**12, 4 * 10**12, 10**11, 1_700_000_000_000, 10_000).to_json()
    assert len(large) - len(small) == 4 and len(large) < 200
    assert b"partitions" not in large


def test_usage_version_1_reads_with_its_replica_list_ignored() -> None:
    v1 = (
        b'{"version":1,"broker":3,"used_bytes":300,"capacity_bytes":1000,"bytes_in":7,'
        b'"timestamp":99,"partitions":{"t":{"0":100,"1":200}}}'
    )
    assert StorageUsage.from_json(v1) == StorageUsage(3, 300, 1000, 7, 99, 0)


def test_autoscaler_state_round_trip_and_garbage() -> None:
    s = AutoscalerState([3, 4], True, True, ["t"], [1, 2], 3, "scale_down", "why", 5, 6)
    assert AutoscalerState.from_json(s.to_json()) == s
    assert AutoscalerState.from_json(b"") == AutoscalerState()
    assert AutoscalerState.from_json(b"[1]") == AutoscalerState()


def test_scale_spec_removes_like_a_statefulset_where_it_can() -> None:
    spec = ScaleSpec(5)
    assert spec.running == [0, 1, 2, 3, 4]
    assert spec.without([4, 3]) == ScaleSpec(3)
    middle = spec.without([1])
    assert middle == ScaleSpec(5, (1,)) and middle.running == [0, 2, 3, 4]
    assert middle.without([4, 3, 2]) == ScaleSpec(1)
    assert ScaleSpec.from_json(middle.to_json()) == middle
    assert ScaleSpec.from_json(b'{"replicas": "x"}') is None
