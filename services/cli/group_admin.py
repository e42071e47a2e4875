"""Consumer-group reads and writes through confluent-kafka's AdminClient, shared by
``kafka-py consumer-groups`` and the console's REST API (same data, same errors).

Every call blocks (the AdminClient's futures); asynchronous callers run them in a thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from services.cli.common import CliError, UsageError, kafka_cli_error
from services.cli.group_offsets_reset import Tp, plan_reset

STATE_NAMES = {
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.EMPTY: "Empty",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.UNKNOWN: "Unknown",
}
STATE_BY_NAME = {v.lower(): k for k, v in STATE_NAMES.items()}


class GroupAdmin:
    """One AdminClient and the group operations the tools need."""

    def __init__(self, admin: AdminClient, timeout_s: float) -> None:
        self.admin = admin
        self.timeout = timeout_s

    def wait(self, fut: Any) -> Any:
        try:
            return fut.result(timeout=self.timeout)
        except TimeoutError:
            raise CliError("timed out waiting for the cluster", kind="unavailable") from None
        except Exception as exc:
            if type(exc).__name__ == "KafkaException":
                raise kafka_cli_error(exc) from None
            raise

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str]]:
        """(group, state) of every group, optionally only those in ``states`` (names)."""
        kwargs: dict[str, Any] = {"request_timeout": self.timeout}
        wanted = [s.strip().lower() for s in states if s.strip()]
        if wanted:
            try:
                kwargs["states"] = {STATE_BY_NAME[s] for s in wanted}
            except KeyError as exc:
                raise UsageError(f"unknown group state {exc.args[0]!r}") from None
        listed = self.wait(self.admin.list_consumer_groups(**kwargs))
        return sorted((g.group_id, STATE_NAMES.get(g.state, "Unknown")) for g in listed.valid)

    def describe(self, groups: Sequence[str]) -> dict[str, Any]:
        futs = self.admin.describe_consumer_groups(list(groups), request_timeout=self.timeout)
        return {g: self.wait(f) for g, f in futs.items()}

    def committed(self, group: str) -> dict[Tp, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        (fut,) = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout
        ).values()
        res = self.wait(fut)
        return {
            (tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0
        }

    def lookup(self, partitions: Iterable[Tp], spec: str | int) -> dict[Tp, int]:
        """ListOffsets of ``partitions`` for "earliest", "latest" or a timestamp (ms)."""
        parts = list(dict.fromkeys(partitions))
        if not parts:
            return {}
        offset_spec = (
            OffsetSpec.earliest()
            if spec == "earliest"
            else OffsetSpec.latest()
            if spec == "latest"
            else OffsetSpec.for_timestamp(int(spec))
        )
        futs = self.admin.list_offsets(
            {TopicPartition(t, p): offset_spec for t, p in parts}, request_timeout=self.timeout
        )
        return {(tp.topic, tp.partition): self.wait(f).offset for tp, f in futs.items()}

    def topic_partitions(self, topics: Sequence[str]) -> list[Tp]:
        """``t`` (all partitions) / ``t:0,2`` as (topic, partition) pairs."""
        out: list[Tp] = []
        whole: list[str] = []
        for spec in topics:
            name, sep, parts = spec.partition(":")
            if sep:
                try:
                    out += [(name, int(p)) for p in parts.split(",") if p.strip()]
                except ValueError:
                    raise UsageError(f"--topic: bad partition list in {spec!r}") from None
            else:
                whole.append(name)
        if whole:
            md = self.admin.list_topics(timeout=self.timeout)
            for name in whole:
                t = md.topics.get(name)
                if t is None or t.error is not None:
                    raise CliError(f"Topic '{name}' does not exist", kind="not_found")
                out += [(name, p) for p in sorted(t.partitions)]
        return out

    def group_docs(self, groups: Sequence[str]) -> list[dict[str, Any]]:
        """State, coordinator, members and per-partition offsets/lag of each group."""
        described = self.describe(groups)
        docs = []
        for group in groups:
            d = described[group]
            state = STATE_NAMES.get(d.state, "Unknown")
            coordinator = f"{d.coordinator.host}:{d.coordinator.port} ({d.coordinator.id})"
            members = [
                {
                    "consumer_id": m.member_id,
                    "host": m.host,
                    "client_id": m.client_id,
                    "assignment": sorted(
                        (tp.topic, tp.partition) for tp in m.assignment.topic_partitions
                    ),
                }
                for m in d.members
            ]
            docs.append(
                {
                    "group": group,
                    "state": state,
                    "coordinator": coordinator,
                    "assignment_strategy": d.partition_assignor or "",
                    "members": members,
                    "offsets": self.offset_rows(group, members) if state != "Dead" else [],
                }
            )
        return docs

    def offset_rows(self, group: str, members: list[dict[str, Any]]) -> list[dict[str, Any]]:
        committed = self.committed(group)
        owner = {tuple(tp): m for m in members for tp in m["assignment"]}
        parts = sorted(set(owner) | set(committed))
        ends = self.lookup(parts, "latest")
        rows = []
        for tp in parts:
            m = owner.get(tp)
            cur = committed.get(tp)
            rows.append(
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "current_offset": cur,
                    "log_end_offset": ends[tp],
                    "lag": None if cur is None else max(0, ends[tp] - cur),
                    "consumer_id": m["consumer_id"] if m else None,
                    "host": m["host"] if m else None,
                    "client_id": m["client_id"] if m else None,
                }
            )
        return rows

    def require_inactive(self, group: str, described: Any) -> None:
        state = STATE_NAMES.get(described.state, "Unknown")
        if state not in ("Empty", "Dead"):
            raise CliError(
                f"Assignments can only be reset if the group '{group}' is inactive, "
                f"but the current state is {state}.",
                kind="conflict",
            )

    def plan(
        self, group: str, scenario: str, value: Any, topics: Sequence[str], all_topics: bool
    ) -> dict[Tp, int]:
        """The offsets a reset of an inactive ``group`` moves to (kafka-consumer-groups.sh)."""
        committed = self.committed(group)
        parts = sorted(committed) if all_topics else self.topic_partitions(topics)
        return plan_reset(scenario, value, parts, committed, self.lookup)

    def apply(self, group: str, plan: dict[Tp, int]) -> None:
        """Commit ``plan`` as the group's offsets."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        if not plan:
            return
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(plan.items())]
        (fut,) = self.admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)], request_timeout=self.timeout
        ).values()
        res = self.wait(fut)
        failed = [tp for tp in res.topic_partitions if tp.error is not None]
        if failed:
            tp = failed[0]
            raise CliError(
                f"resetting {group} {tp.topic}-{tp.partition} failed: {tp.error.str()}",
                kind="conflict",
            )
