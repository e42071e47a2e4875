"""Safety verdicts over a ``History``: pure functions, unit-tested with hand-made histories.

Each verdict is a function ``History -> list[Anomaly]`` registered under its name with
``@verdict("name")``; ``check(history)`` runs them all (or the names given). The final log is the
first ``FinalRead``; the others are compared with it. Later anomalies (aborted reads of
transactions, zone partitions) register their own function here or in their own module.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tests.e2e.checker.history import TP, FinalRead, History, parse_value


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    detail: str


@dataclass(slots=True)
class VerdictResult:
    name: str
    anomalies: list[Anomaly] = field(default_factory=list)
    checked: int = 0  # how many things the verdict looked at (records, commits...)

    @property
    def count(self) -> int:
        return len(self.anomalies)


Verdict = Callable[[History], tuple[list[Anomaly], int]]
VERDICTS: dict[str, Verdict] = {}
#: what the fault tests assert to be zero unless they say otherwise
SAFETY = (
    "lost",
    "duplicate",
    "reordered",
    "inconsistent",
    "group_skipped",
    "group_read_not_in_log",
    "group_commit_lost",
)


def verdict(name: str) -> Callable[[Verdict], Verdict]:
    """Register a verdict: ``fn(history) -> (anomalies, checked)``."""

    def register(fn: Verdict) -> Verdict:
        VERDICTS[name] = fn
        return fn

    return register


def check(history: History, names: Iterable[str] | None = None) -> dict[str, VerdictResult]:
    """Run the verdicts (all registered ones by default), in registration order."""
    out: dict[str, VerdictResult] = {}
    for name in names if names is not None else VERDICTS:
        anomalies, checked = VERDICTS[name](history)
        out[name] = VerdictResult(name, anomalies, checked)
    return out


# ---- helpers ---------------------------------------------------------------------------
def final_log(history: History) -> FinalRead:
    if not history.final_reads:
        raise ValueError("the history has no final read")
    return history.final_reads[0]


Place = tuple[str, int, int]
"""(topic, partition, offset)."""


def _positions(read: FinalRead) -> dict[bytes, list[Place]]:
    """value -> every place holding it."""
    out: dict[bytes, list[Place]] = defaultdict(list)
    for (topic, p), recs in read.records.items():
        for off, v in recs:
            if v is not None:
                out[v].append((topic, p, off))
    return out


def _at(read: FinalRead) -> dict[TP, dict[int, bytes | None]]:
    return {tp: dict(recs) for tp, recs in read.records.items()}


def _show(v: bytes | None) -> str:
    return "null" if v is None else v.decode(errors="replace")


# ---- verdicts --------------------------------------------------------------------------
@verdict("lost")
def lost(history: History) -> tuple[list[Anomaly], int]:
    """Acknowledged but absent from the final log."""
    where = _positions(final_log(history))
    acked = history.acked()
    out = [
        Anomaly(
            "lost",
            f"{_show(w.value)} acked at {w.topic}/{w.partition}@{w.offset}, not in the final log",
        )
        for w in acked
        if w.value not in where
    ]
    return out, len(acked)


@verdict("duplicate")
def duplicate(history: History) -> tuple[list[Anomaly], int]:
    """A value stored more than once (every extra copy counts, acknowledged or not)."""
    where = _positions(final_log(history))
    out: list[Anomaly] = []
    for v, places in where.items():
        for extra in places[1:]:
            first = places[0]
            out.append(
                Anomaly(
                    "duplicate",
                    f"{_show(v)} at {first[0]}/{first[1]}@{first[2]} and again at "
                    f"{extra[0]}/{extra[1]}@{extra[2]}",
                )
            )
    return out, len(where)


@verdict("reordered")
def reordered(history: History) -> tuple[list[Anomaly], int]:
    """Per writer and partition, sequence numbers must grow with the offset."""
    out: list[Anomaly] = []
    checked = 0
    for (topic, p), recs in final_log(history).records.items():
        last: dict[str, tuple[int, int]] = {}  # writer -> (highest seq so far, its offset)
        for off, v in recs:
            parsed = parse_value(v)
            if parsed is None:
                continue
            writer, seq = parsed
            checked += 1
            prev = last.get(writer)
            if prev is not None and seq <= prev[0]:
                if seq != prev[0]:  # the same seq again is a duplicate, counted there
                    out.append(
                        Anomaly(
                            "reordered",
                            f"{topic}/{p}: {writer} seq {seq} at offset {off} after seq "
                            f"{prev[0]} at offset {prev[1]}",
                        )
                    )
                continue
            last[writer] = (seq, off)
    return out, checked


@verdict("inconsistent")
def inconsistent(history: History) -> tuple[list[Anomaly], int]:
    """The final reads disagree with each other, or an acknowledged offset does not hold the
    acknowledged value (while the value is elsewhere in the log: absent is ``lost``).

    An acknowledgement without an offset is librdkafka's *implicit ack*: a request failed with
    an outcome it counts as "possibly persisted" (NOT_ENOUGH_REPLICAS_AFTER_APPEND, a timeout,
    a broken connection) and a later batch of the same idempotent producer succeeded, which
    proves the earlier one was stored, so its messages are reported delivered with offset -1
    (confluent-kafka's ``offset()`` gives None; rdkafka_request.c "implicitly acked by
    subsequent batch success"; a Kafka broker causes the same). Such a write has no offset to
    compare: ``lost`` and ``duplicate`` still check it, and ``History.acked_without_offset``
    counts them for the summary."""
    out: list[Anomaly] = []
    checked = 0
    base = final_log(history)
    base_at = _at(base)
    for other in history.final_reads[1:]:
        other_at = _at(other)
        for tp in sorted(set(base_at) | set(other_at)):
            a, b = base_at.get(tp, {}), other_at.get(tp, {})
            for off in sorted(set(a) | set(b)):
                checked += 1
                if off not in a or off not in b or a[off] != b[off]:
                    va = _show(a[off]) if off in a else "<absent>"
                    vb = _show(b[off]) if off in b else "<absent>"
                    out.append(
                        Anomaly(
                            "inconsistent",
                            f"{tp[0]}/{tp[1]}@{off}: {base.reader} read {va}, "
                            f"{other.reader} read {vb}",
                        )
                    )
    where = _positions(base)
    for w in history.acked():
        if w.offset is None:
            continue
        checked += 1
        places = where.get(w.value)
        if places and (w.topic, w.partition, w.offset) not in places:
            held = _show(base_at.get(w.tp, {}).get(w.offset, b"<absent>"))
            out.append(
                Anomaly(
                    "inconsistent",
                    f"{_show(w.value)} acked at {w.topic}/{w.partition}@{w.offset} (which holds "
                    f"{held}) but stored at " + ", ".join(f"{t}/{p}@{o}" for t, p, o in places),
                )
            )
    return out, checked


@verdict("group_skipped")
def group_skipped(history: History) -> tuple[list[Anomaly], int]:
    """An acknowledged commit of offset C on a partition while some record of the final log
    below C had not been read by any member of the group before the commit (the group starts
    at offset 0), or a commit past the end of the final log."""
    first_read: dict[tuple[str, TP], dict[int, int]] = defaultdict(dict)  # offset -> first step
    for r in history.reads:
        first_read[(r.group, (r.topic, r.partition))].setdefault(r.offset, r.step)
    log = {tp: [off for off, _ in recs] for tp, recs in final_log(history).records.items()}
    # per (group, tp): for the first i offsets of the final log, the latest first-read step
    # (unread = infinite), so a commit is checked with one bisect
    never = float("inf")
    latest: dict[tuple[str, TP], list[float]] = {}
    out: list[Anomaly] = []
    reported: set[tuple[str, TP, int]] = set()
    commits = [c for c in history.commits if c.ok]
    for c in commits:
        tp = (c.topic, c.partition)
        offsets = log.get(tp, [])
        end = offsets[-1] + 1 if offsets else 0
        if c.offset > end:
            out.append(
                Anomaly(
                    "group_skipped",
                    f"group {c.group} ({c.member}) committed {tp[0]}/{tp[1]}@{c.offset}, past "
                    f"the final log end {end}",
                )
            )
        seen = first_read.get((c.group, tp), {})
        key = (c.group, tp)
        if key not in latest:
            acc, run = [0.0], 0.0
            for off in offsets:
                run = max(run, seen.get(off, never))
                acc.append(run)
            latest[key] = acc
        n = bisect_left(offsets, c.offset)
        if latest[key][n] <= c.step:
            continue
        for off in offsets[:n]:
            step = seen.get(off)
            if (step is None or step > c.step) and (c.group, tp, off) not in reported:
                reported.add((c.group, tp, off))
                out.append(
                    Anomaly(
                        "group_skipped",
                        f"group {c.group} ({c.member}) committed {tp[0]}/{tp[1]}@{c.offset} "
                        f"before reading offset {off}",
                    )
                )
    return out, len(commits)


@verdict("group_read_not_in_log")
def group_read_not_in_log(history: History) -> tuple[list[Anomaly], int]:
    """A member read a record the final log does not hold at that offset."""
    at = _at(final_log(history))
    out = [
        Anomaly(
            "group_read_not_in_log",
            f"{r.member} of {r.group} read {_show(r.value)} at {r.topic}/{r.partition}@{r.offset};"
            f" the final log holds "
            + (
                _show(at[(r.topic, r.partition)][r.offset])
                if r.offset in at.get((r.topic, r.partition), {})
                else "nothing"
            ),
        )
        for r in history.reads
        if at.get((r.topic, r.partition), {}).get(r.offset, b"\0<absent>") != r.value
    ]
    return out, len(history.reads)


@verdict("group_commit_lost")
def group_commit_lost(history: History) -> tuple[list[Anomaly], int]:
    """The committed offset fetched after the heal differs from the last acknowledged commit
    (only for groups whose committed offsets were fetched)."""
    last: dict[tuple[str, TP], int] = {}
    for c in sorted((c for c in history.commits if c.ok), key=lambda c: c.step):
        last[(c.group, (c.topic, c.partition))] = c.offset
    out: list[Anomaly] = []
    checked = 0
    for (group, tp), offset in sorted(last.items()):
        fetched = history.final_commits.get(group)
        if fetched is None:
            continue
        checked += 1
        got = fetched.get(tp)
        if got != offset:
            out.append(
                Anomaly(
                    "group_commit_lost",
                    f"group {group} {tp[0]}/{tp[1]}: last acknowledged commit {offset}, "
                    f"committed offset after the heal {got}",
                )
            )
    return out, checked
