"""What happened during a run, as plain data: the checker's verdicts read only this.

Every value a writer produces is unique and names its writer and sequence number
(``encode_value``). A run records one ``Write`` per value (its partition and what the delivery
report said), the group's reads and commits (``GroupRead``/``GroupCommit``, ordered by a global
``step``), and the independent full reads taken after the heal (``FinalRead``). Histories are
built by the workload threads of a run, or by hand in unit tests.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.e2e.checker.txn import TxnHistory

TP = tuple[str, int]
"""(topic, partition)."""

ACKED = "acked"
FAILED = "failed"
UNKNOWN = "unknown"  # no delivery report yet (still in flight when the run ended)


def encode_value(writer: str, seq: int) -> bytes:
    """The unique value of a writer's ``seq``-th record: ``b"<writer>:<seq>"``."""
    return f"{writer}:{seq:09d}".encode()


def parse_value(value: bytes | None) -> tuple[str, int] | None:
    """(writer, seq) of a value made by ``encode_value``; None for anything else."""
    if not value:
        return None
    writer, sep, seq = value.decode(errors="replace").rpartition(":")
    if not sep or not seq.isdigit():
        return None
    return writer, int(seq)


@dataclass(slots=True)
class Write:
    """One produced value and what its delivery report said (``offset`` when acknowledged)."""

    writer: str
    seq: int
    topic: str
    partition: int
    outcome: str = UNKNOWN
    offset: int | None = None
    error: str | None = None
    sent_at: float = 0.0  # wall clock of the send, and of the delivery report (0: none yet)
    answered_at: float = 0.0

    @property
    def value(self) -> bytes:
        return encode_value(self.writer, self.seq)

    @property
    def tp(self) -> TP:
        return self.topic, self.partition


@dataclass(frozen=True, slots=True)
class GroupRead:
    group: str
    member: str
    topic: str
    partition: int
    offset: int
    value: bytes | None
    step: int


@dataclass(frozen=True, slots=True)
class GroupCommit:
    """A commit of ``offset`` (the next offset to read) for one partition; ``ok`` when the
    coordinator acknowledged it. ``step`` is taken after the answer arrived."""

    group: str
    member: str
    topic: str
    partition: int
    offset: int
    step: int
    ok: bool = True
    error: str | None = None


@dataclass(slots=True)
class FinalRead:
    """One full read of every partition after the heal: tp -> [(offset, value), ...]."""

    reader: str
    records: dict[TP, list[tuple[int, bytes | None]]] = field(default_factory=dict)
    error: str | None = None  # the read could not complete


@dataclass(slots=True)
class History:
    """Everything a run recorded. Thread-safe appenders; the verdicts read it after the run."""

    writes: dict[bytes, Write] = field(default_factory=dict)
    reads: list[GroupRead] = field(default_factory=list)
    commits: list[GroupCommit] = field(default_factory=list)
    final_reads: list[FinalRead] = field(default_factory=list)
    #: group -> tp -> committed offset fetched from the coordinator after the heal
    final_commits: dict[str, dict[TP, int]] = field(default_factory=dict)
    #: the transactional pipeline's reads and outcomes (``txn.TxnPipeline``), if one ran
    txn: TxnHistory | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _steps: Iterator[int] = field(default_factory=itertools.count, repr=False)

    def step(self) -> int:
        """The next point in the run's global order of group events."""
        with self._lock:
            return next(self._steps)

    # ---- writers --------------------------------------------------------------------
    def sent(self, writer: str, seq: int, topic: str, partition: int) -> Write:
        w = Write(writer, seq, topic, partition, sent_at=time.time())
        with self._lock:
            self.writes[w.value] = w
        return w

    def delivered(
        self, value: bytes, partition: int, offset: int | None, error: str | None
    ) -> None:
        """A delivery report: ``offset`` when acknowledged, else ``error``."""
        with self._lock:
            w = self.writes[value]
            w.answered_at = time.time()
            if error is None:
                w.outcome, w.offset, w.partition = ACKED, offset, partition
            else:
                w.outcome, w.error = FAILED, error

    # ---- group ----------------------------------------------------------------------
    def group_read(
        self, group: str, member: str, topic: str, partition: int, offset: int, value: bytes | None
    ) -> None:
        r = GroupRead(group, member, topic, partition, offset, value, self.step())
        with self._lock:
            self.reads.append(r)

    def group_commit(
        self,
        group: str,
        member: str,
        offsets: Iterable[tuple[str, int, int]],
        error: str | None = None,
    ) -> None:
        step = self.step()
        with self._lock:
            for topic, partition, offset in offsets:
                self.commits.append(
                    GroupCommit(group, member, topic, partition, offset, step, error is None, error)
                )

    # ---- views ----------------------------------------------------------------------
    def acked(self) -> list[Write]:
        return [w for w in self.writes.values() if w.outcome == ACKED]

    def acked_without_offset(self) -> int:
        """Acknowledged writes whose client reported no offset (librdkafka's implicit acks)."""
        return sum(1 for w in self.writes.values() if w.outcome == ACKED and w.offset is None)

    def counts(self) -> dict[str, int]:
        out = {ACKED: 0, FAILED: 0, UNKNOWN: 0}
        for w in self.writes.values():
            out[w.outcome] += 1
        return out

    def dump(self, directory: Path) -> None:
        """Write the history as JSON lines (values as text) for the evidence directory."""
        directory.mkdir(parents=True, exist_ok=True)

        def text(v: bytes | None) -> str | None:
            return None if v is None else v.decode(errors="replace")

        with open(directory / "writes.jsonl", "w") as f:
            for w in self.writes.values():
                f.write(json.dumps(asdict(w)) + "\n")
        with open(directory / "group.jsonl", "w") as f:
            for r in self.reads:
                f.write(json.dumps({"read": {**asdict(r), "value": text(r.value)}}) + "\n")
            for c in self.commits:
                f.write(json.dumps({"commit": asdict(c)}) + "\n")
        for fr in self.final_reads:
            with open(directory / f"final-read-{fr.reader}.jsonl", "w") as f:
                if fr.error:
                    f.write(json.dumps({"error": fr.error}) + "\n")
                for (topic, p), recs in sorted(fr.records.items()):
                    for off, v in recs:
                        f.write(json.dumps([topic, p, off, text(v)]) + "\n")
        committed = {
            g: [[t, p, o] for (t, p), o in sorted(tps.items())]
            for g, tps in self.final_commits.items()
        }
        (directory / "final-commits.json").write_text(json.dumps(committed, indent=1) + "\n")
