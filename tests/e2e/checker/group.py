"""A consumer group whose members commit after processing, recording every read and commit.

Each member is a confluent-kafka consumer in its own thread, subscribed to the topic with
``enable.auto.commit=false``; after each polled batch it records the records read and commits,
synchronously, the next offset of every partition it read in the batch. A failed commit is
recorded with its error (the next batch commits again). Assignments and revocations go to the
timeline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from tests.e2e.checker.history import TP, History
from tests.e2e.checker.timeline import Timeline

CONSUMER_DEFAULTS: dict[str, object] = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 1000,
    "fetch.wait.max.ms": 100,
    "topic.metadata.refresh.interval.ms": 2000,
    "log_level": 2,
}


class GroupMember:
    def __init__(
        self,
        group: str,
        name: str,
        bootstrap: str,
        topic: str,
        history: History,
        timeline: Timeline,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.group, self.name, self.topic = group, name, topic
        self.bootstrap = bootstrap
        self.history, self.timeline = history, timeline
        self.config = dict(config or {})
        self.read = 0
        self.commits_ok = 0
        self.commits_failed = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._crash: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(60)
        if self._crash is not None:
            raise RuntimeError(f"group member {self.name} crashed") from self._crash

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        def assigned(_c: Any, parts: list[Any]) -> None:
            self.timeline.note(self.name, f"assigned {sorted(p.partition for p in parts)}")

        def revoked(_c: Any, parts: list[Any]) -> None:
            self.timeline.note(self.name, f"revoked {sorted(p.partition for p in parts)}")

        conf = {
            **CONSUMER_DEFAULTS,
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.name,
            **self.config,
        }
        consumer = Consumer(conf)
        errors_noted = 0
        try:
            consumer.subscribe([self.topic], on_assign=assigned, on_revoke=revoked)
            while not self._halt.is_set():
                msgs = consumer.consume(500, 0.2)
                nxt: dict[TP, int] = {}
                for m in msgs:
                    if m.error() is not None:
                        if errors_noted < 20:
                            errors_noted += 1
                            self.timeline.note(self.name, f"consumer error: {m.error()}")
                        continue
                    tp = (m.topic(), m.partition())
                    self.history.group_read(
                        self.group, self.name, tp[0], tp[1], m.offset(), m.value()
                    )
                    self.read += 1
                    nxt[tp] = m.offset() + 1
                if not nxt:
                    continue
                offsets = [TopicPartition(t, p, o) for (t, p), o in nxt.items()]
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as exc:
                    self.commits_failed += 1
                    self.history.group_commit(
                        self.group,
                        self.name,
                        [(t, p, o) for (t, p), o in nxt.items()],
                        error=str(exc.args[0]),
                    )
                    if self.commits_failed <= 10:
                        self.timeline.note(self.name, f"commit failed: {exc.args[0]}")
                else:
                    self.commits_ok += 1
                    self.history.group_commit(
                        self.group, self.name, [(t, p, o) for (t, p), o in nxt.items()]
                    )
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self._crash = exc
            self.timeline.note(self.name, f"member crashed: {exc!r}")
        finally:
            consumer.close()


class ConsumerGroup:
    """``members`` confluent-kafka consumers of one group on one topic."""

    def __init__(
        self,
        group: str,
        bootstrap: str,
        topic: str,
        history: History,
        timeline: Timeline,
        *,
        members: int = 2,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.group = group
        self.members = [
            GroupMember(group, f"{group}-m{i}", bootstrap, topic, history, timeline, config)
            for i in range(members)
        ]

    def start(self) -> None:
        for m in self.members:
            m.start()

    def stop(self) -> None:
        """Stop every member; the first member's crash, if any, is raised after all stopped."""
        for m in self.members:
            m._halt.set()
        crash: RuntimeError | None = None
        for m in self.members:
            try:
                m.stop()
            except RuntimeError as exc:
                crash = crash or exc
        if crash is not None:
            raise crash

    @property
    def read(self) -> int:
        return sum(m.read for m in self.members)

    def caught_up(self, ends: Mapping[TP, int], history: History) -> bool:
        """Whether the group has read every partition up to ``ends`` (its final log ends)."""
        best: dict[TP, int] = {}
        for r in list(history.reads):
            if r.group == self.group:
                tp = (r.topic, r.partition)
                best[tp] = max(best.get(tp, -1), r.offset)
        return all(best.get(tp, -1) + 1 >= end for tp, end in ends.items() if end > 0)

    def wait_caught_up(self, ends: Mapping[TP, int], history: History, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.caught_up(ends, history):
                return True
            time.sleep(0.5)
        return False
