"""A streaming read whose topic is deleted while a micro-batch is planned: the partition is
reported gone (Spark's data-loss rule), never a ListOffsets failure of the whole query.

The cluster view is a stand-in whose metadata still lists the topic while ListOffsets already
answers UNKNOWN_TOPIC_OR_PART, the window a real deletion opens between the two calls."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from confluent_kafka import KafkaError, KafkaException

from services.spark.options import KafkaPySparkError, parse_source
from services.spark.source import KafkaStreamReader

TP = tuple[str, int]


class _DeletedDuringPlanning:
    """Metadata lists ``t`` with 2 partitions; ListOffsets knows only those in ``alive``."""

    def __init__(self, alive: set[TP]) -> None:
        self.alive = alive

    def partitions(self, *, require_topics: bool) -> list[TP]:
        return [("t", 0), ("t", 1)]

    def _offsets(self, tps: Iterable[TP], value: int, gone_ok: bool) -> dict[TP, int]:
        out = {}
        for tp in tps:
            if tp in self.alive:
                out[tp] = value
            elif not gone_ok:
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        return out

    def latest(self, tps: Iterable[TP], *, gone_ok: bool = False) -> dict[TP, int]:
        return self._offsets(tps, 10, gone_ok)

    def earliest(self, tps: Iterable[TP], *, gone_ok: bool = False) -> dict[TP, int]:
        return self._offsets(tps, 0, gone_ok)


def _reader(fail_on_data_loss: bool) -> KafkaStreamReader:
    opts = parse_source(
        {
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "subscribe": "t",
            "failOnDataLoss": str(fail_on_data_loss).lower(),
        },
        streaming=True,
    )
    reader = KafkaStreamReader(opts)
    reader.view.close()
    return reader


def test_a_partition_deleted_before_its_end_offset_is_listed_is_gone() -> None:
    reader = _reader(fail_on_data_loss=True)
    reader.view = _DeletedDuringPlanning({("t", 0)})  # type: ignore[assignment]
    start = {"t": {"0": 3, "1": 4}}
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"t": {"0": 10}}
    with pytest.raises(KafkaPySparkError, match=r"\('t', 1\)\] are gone"):
        reader.partitions(start, end)


def test_without_fail_on_data_loss_the_rest_is_read() -> None:
    reader = _reader(fail_on_data_loss=False)
    reader.view = _DeletedDuringPlanning({("t", 0)})  # type: ignore[assignment]
    start = {"t": {"0": 3, "1": 4}}
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    planned = reader.partitions(start, end)
    assert [(p.rng.topic, p.rng.partition, p.rng.start, p.rng.until) for p in planned] == [
        ("t", 0, 3, 10)
    ]


def test_a_new_partition_deleted_while_planned_is_gone() -> None:
    """Partition 1 is new in this batch and vanishes between the end offsets and the plan."""
    reader = _reader(fail_on_data_loss=True)
    view = _DeletedDuringPlanning({("t", 0), ("t", 1)})
    reader.view = view  # type: ignore[assignment]
    start = {"t": {"0": 3}}
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"t": {"0": 10, "1": 10}}
    view.alive = {("t", 0)}
    with pytest.raises(KafkaPySparkError, match="are gone"):
        reader.partitions(start, end)
