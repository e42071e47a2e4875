"""Driver-side view of the cluster: which partitions a subscription covers and their offsets.

Offsets travel as Spark's Kafka-source JSON, `{"topic":{"0":42}}` (string partition keys), so a
query's checkpoint reads the same as with Spark's built-in source.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from services.spark.options import (
    EARLIEST,
    LATEST,
    KafkaPySparkError,
    OffsetSpec,
    SourceOptions,
    librdkafka_config,
)

TP = tuple[str, int]
Offsets = dict[TP, int]

#: ListOffsets errors of a partition whose topic was deleted after the metadata was read
_GONE = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC)


def offsets_to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """{(t, p): o} -> {"t": {"p": o}}, partitions in numeric order."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, Any]]) -> Offsets:
    return {(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


class ClusterView:
    """Metadata and ListOffsets through confluent-kafka's AdminClient (created lazily, never
    pickled: Spark ships readers to executors)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: AdminClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_admin": None}

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            conf = librdkafka_config(self.opts.client)
            conf.pop("isolation.level", None)
            conf.pop("group.id", None)
            self._admin = AdminClient(conf)
        return self._admin

    @property
    def _timeout_s(self) -> float:
        return self.opts.api_timeout_ms / 1000

    def _unreachable(self, err: object) -> KafkaPySparkError:
        self.close()  # no client left retrying in the background
        return KafkaPySparkError(
            f"Cannot reach the Kafka cluster at {self.opts.bootstrap} within "
            f"{self.opts.api_timeout_ms} ms (kafka.default.api.timeout.ms): {err}"
        )

    def topic_partitions(self) -> dict[str, int]:
        """Topics of the subscription that exist now -> their partition count."""
        try:
            md = self.admin.list_topics(timeout=self._timeout_s)
        except KafkaException as e:
            raise self._unreachable(e.args[0] if e.args else e) from None
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and self.opts.topic_matches(name)
        }

    def partitions(self, *, require_topics: bool) -> list[TP]:
        """The partitions the query reads now. `assign` always names existing partitions;
        `subscribe` names existing topics when `require_topics` (batch queries)."""
        topics = self.topic_partitions()
        if self.opts.assign:
            out = []
            for t, parts in sorted(self.opts.assign.items()):
                if t not in topics:
                    raise KafkaPySparkError(f"Topic '{t}' of option 'assign' does not exist")
                for p in parts:
                    if not 0 <= p < topics[t]:
                        raise KafkaPySparkError(
                            f"Partition {t}-{p} of option 'assign' does not exist "
                            f"(the topic has {topics[t]} partitions)"
                        )
                    out.append((t, p))
            return out
        if require_topics and self.opts.subscribe:
            missing = sorted(set(self.opts.subscribe) - set(topics))
            if missing:
                raise KafkaPySparkError(f"Topic(s) {', '.join(missing)} do not exist")
        return [(t, p) for t, n in sorted(topics.items()) for p in range(n)]

    def list_offsets(
        self, specs: Mapping[TP, KafkaOffsetSpec], *, gone_ok: bool = False
    ) -> Offsets:
        """ListOffsets through the AdminClient, with the query's isolation level (-1 where a
        timestamp matched no record). With ``gone_ok`` a partition whose topic was deleted
        since the metadata was read is left out (a streaming query reports it as gone)."""
        if not specs:
            return {}
        level = (
            IsolationLevel.READ_COMMITTED
            if self.opts.isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        futures = self.admin.list_offsets(
            {TopicPartition(t, p): s for (t, p), s in specs.items()},
            isolation_level=level,
            request_timeout=self._timeout_s,
        )
        out: Offsets = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(timeout=self._timeout_s).offset
            except KafkaException as e:
                err = e.args[0] if e.args else e
                if gone_ok and getattr(err, "code", lambda: None)() in _GONE:
                    continue
                raise KafkaPySparkError(
                    f"Cannot list offsets of {tp.topic}-{tp.partition} at {self.opts.bootstrap}: "
                    f"{err}"
                ) from None
        return out

    def earliest(self, tps: Iterable[TP], *, gone_ok: bool = False) -> Offsets:
        return self.list_offsets({tp: KafkaOffsetSpec.earliest() for tp in tps}, gone_ok=gone_ok)

    def latest(self, tps: Iterable[TP], *, gone_ok: bool = False) -> Offsets:
        return self.list_offsets({tp: KafkaOffsetSpec.latest() for tp in tps}, gone_ok=gone_ok)

    def resolve(self, spec: OffsetSpec, tps: list[TP], *, starting: bool) -> Offsets:
        """Offsets for `spec` over `tps` (Spark's rules: specific offsets and timestamps must
        name every partition; -2/-1 mean earliest/latest)."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        which = "startingOffsets" if starting else "endingOffsets"
        wanted: Offsets
        if spec.kind == "global_timestamp":
            wanted = {tp: int(spec.timestamp or 0) for tp in tps}
        else:
            given = {(t, p): v for t, parts in spec.offsets.items() for p, v in parts.items()}
            if set(given) != set(tps):
                name = which if spec.kind == "offsets" else which + "ByTimestamp"
                raise KafkaPySparkError(
                    f"{name} must name every partition of the query (-1 = latest, -2 = "
                    f"earliest); specified {sorted(given)}, assigned {sorted(tps)}"
                )
            if spec.kind == "offsets":
                return self._specific(given)
            wanted = given
        found = self.list_offsets(
            {tp: KafkaOffsetSpec.for_timestamp(ts) for tp, ts in wanted.items()}
        )
        unmatched = [tp for tp, o in found.items() if o < 0]
        if unmatched:
            if starting and self.opts.timestamp_strategy == "error":
                raise KafkaPySparkError(
                    f"No offset matched the starting timestamp for {sorted(unmatched)} "
                    "(startingOffsetsByTimestampStrategy=error; use 'latest' to start from "
                    "the end of those partitions)"
                )
            found.update(self.latest(unmatched))
        return found

    def _specific(self, given: Offsets) -> Offsets:
        out = {tp: o for tp, o in given.items() if o >= 0}
        out.update(self.earliest([tp for tp, o in given.items() if o == EARLIEST]))
        out.update(self.latest([tp for tp, o in given.items() if o == LATEST]))
        return out

    def close(self) -> None:
        self._admin = None
