"""A running pipeline's progress: Spark's query progress as Prometheus metrics on the driver and
as one line per micro-batch.

Every progress is counted once: the CLI reads the query's recent progresses (Spark keeps the
last 100), not only the last one, so micro-batches finishing between two polls are not lost.

Offsets behind = the source's latest offset of a partition (reported by the `kafkapy` source
when the batch was planned) minus the batch's end offset of that partition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

Offsets = dict[tuple[str, int], int]


def _offsets(raw: Any) -> Offsets:
    """Spark's Kafka-source offset JSON (a string or already parsed) as {(topic, p): offset};
    other sources' offsets (a file source's ``{"logOffset": 3}``) give nothing."""
    if raw is None:
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(data, Mapping):
        return {}
    return {
        (t, int(p)): int(o)
        for t, parts in data.items()
        if isinstance(parts, Mapping)
        for p, o in parts.items()
    }


def offsets_behind(progress: Mapping[str, Any]) -> Offsets:
    """Per partition of every source: latest offset − the batch's end offset (never below 0)."""
    out: Offsets = {}
    for src in progress.get("sources") or []:
        end = _offsets(src.get("endOffset"))
        for tp, latest in _offsets(src.get("latestOffset")).items():
            out[tp] = max(0, latest - end.get(tp, 0))
    return out


def _key(progress: Mapping[str, Any]) -> tuple[str, int]:
    """What tells progresses apart: the trigger's time, then the batch id (an idle trigger
    reports the batch id of the batch run after it)."""
    return (str(progress.get("timestamp") or ""), int(progress.get("batchId", -1)))


class ProgressMetrics:
    """Prometheus metrics of one pipeline's query, updated from each new progress."""

    def __init__(self, pipeline: str, registry: CollectorRegistry | None = None) -> None:
        self.pipeline = pipeline
        self.registry = registry or CollectorRegistry()
        labels = ["pipeline"]
        self.batch = Gauge(
            "kafkapy_pipeline_batch_id",
            "Last completed micro-batch",
            labels,
            registry=self.registry,
        )
        self.input_rows = Counter(
            "kafkapy_pipeline_input_rows", "Rows read by the query", labels, registry=self.registry
        )
        self.output_rows = Counter(
            "kafkapy_pipeline_output_rows",
            "Rows written by the query's sink (when the sink reports them)",
            labels,
            registry=self.registry,
        )
        self.input_rate = Gauge(
            "kafkapy_pipeline_input_rows_per_second",
            "Rows/s arriving, last micro-batch",
            labels,
            registry=self.registry,
        )
        self.processed_rate = Gauge(
            "kafkapy_pipeline_processed_rows_per_second",
            "Rows/s processed, last micro-batch",
            labels,
            registry=self.registry,
        )
        self.behind = Gauge(
            "kafkapy_pipeline_offsets_behind",
            "Latest offset minus the last micro-batch's end offset",
            ["pipeline", "topic", "partition"],
            registry=self.registry,
        )
        self._last_batch: int | None = None
        self._last_key: tuple[str, int] | None = None

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def observe_all(self, progresses: Sequence[Mapping[str, Any]] | None) -> list[str]:
        """Record the progresses not seen yet of Spark's `query.recentProgress` (oldest first);
        returns their lines."""
        recent = list(progresses or [])
        keys = [_key(p) for p in recent]
        if self._last_key in keys:
            recent = recent[keys.index(self._last_key) + 1 :]
        return [line for p in recent if (line := self.observe(p)) is not None]

    def observe(self, progress: Mapping[str, Any] | None) -> str | None:
        """Record one of Spark's query progresses; returns its line, or None when it
        was seen already."""
        if not progress or _key(progress) == self._last_key:
            return None
        self._last_key = _key(progress)
        self._last_batch = int(progress["batchId"])
        p = self.pipeline
        rows = int(progress.get("numInputRows") or 0)
        self.batch.labels(p).set(self._last_batch)
        self.input_rows.labels(p).inc(rows)
        out = int((progress.get("sink") or {}).get("numOutputRows", -1))
        if out >= 0:
            self.output_rows.labels(p).inc(out)
        in_rate = float(progress.get("inputRowsPerSecond") or 0.0)
        done_rate = float(progress.get("processedRowsPerSecond") or 0.0)
        self.input_rate.labels(p).set(in_rate)
        self.processed_rate.labels(p).set(done_rate)
        behind = offsets_behind(progress)
        for (topic, part), lag in behind.items():
            self.behind.labels(p, topic, str(part)).set(lag)
        return (
            f"batch {self._last_batch}: {rows} rows, {in_rate:.0f} rows/s in, "
            f"{done_rate:.0f} rows/s processed, {sum(behind.values())} offsets behind"
        )
