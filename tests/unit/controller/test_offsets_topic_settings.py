"""offsets.topic.* settings of the controller and the coordinator_shards gauge."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from services.common.settings import ConfigError
from services.common.zk.layout import ShardMap, ShardOwner
from services.controller.metrics import ControllerMetrics
from services.controller.model import ControllerContext
from services.controller.settings import ControllerSettings


def test_offsets_topic_defaults_are_kafkas() -> None:
    s = ControllerSettings.load(["--controller.id", "0"], env={})
    assert s.offsets_topic_num_partitions == 50
    assert s.offsets_topic_replication_factor == 3
    assert s.offsets_topic_segment_bytes == 104857600


def test_offsets_topic_flags_and_env() -> None:
    s = ControllerSettings.load(
        ["--controller.id", "0", "--offsets.topic.num.partitions", "6"],
        env={"KAFKAPY_OFFSETS_TOPIC_REPLICATION_FACTOR": "1"},
    )
    assert (s.offsets_topic_num_partitions, s.offsets_topic_replication_factor) == (6, 1)


@pytest.mark.parametrize(
    ("prop", "value"),
    [
        ("offsets.topic.num.partitions", "0"),
        ("offsets.topic.replication.factor", "0"),
        ("offsets.topic.replication.factor", "32768"),
        ("offsets.topic.segment.bytes", "0"),
    ],
)
def test_offsets_topic_bad_values(prop: str, value: str) -> None:
    with pytest.raises(ConfigError, match=prop):
        ControllerSettings.load(["--controller.id", "0", f"--{prop}", value], env={})


def _gauges(registry: CollectorRegistry) -> dict[str, float]:
    return {
        s.labels["coordinator"]: s.value
        for m in registry.collect()
        if m.name == "kafkapy_controller_coordinator_shards"
        for s in m.samples
    }


def test_coordinator_shards_gauge_follows_the_map_and_clears_on_standby() -> None:
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    metrics.update_shards(
        ShardMap(3, {0: ShardOwner(1, 0, 7), 1: ShardOwner(2, 0, 8), 2: ShardOwner(1, 0, 9)})
    )
    assert _gauges(registry) == {"1": 2.0, "2": 1.0}
    metrics.update_shards(ShardMap(3, {p: ShardOwner(2, 1, 7 + p) for p in range(3)}))
    assert _gauges(registry) == {"2": 3.0}
    metrics.update(ControllerContext(1, 0))
    assert _gauges(registry) == {"2": 3.0}
    metrics.update(None)
    assert _gauges(registry) == {}
