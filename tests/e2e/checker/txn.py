"""The checker's transactional workload and verdicts (issue 15 §3).

``TxnPipeline`` runs consume-transform-produce: a feeder writes ``count`` input values
(``b"in:<seq>"``, idempotent, before the pipeline starts) to the checker's topic; ``workers``
confluent-kafka workers, members of one consumer group reading ``read_committed``, each with a
transactional producer, write ``b"out:<seq>|<worker>.<incarnation>.<txn>"`` to the output topic
with the input offsets in the same transaction (``send_offsets_to_transaction``). An error that
needs an abort aborts and rewinds the worker to the group's committed offsets; a fatal one starts
a new producer (same ``transactional.id``: it fences the old). Every ``every_abort``-th
transaction is aborted on purpose, so the output log holds aborted data.

``phase_hook`` lets a test act at a precise point of one worker's transaction: ``"produced"``
(records sent, before ``send_offsets``), ``"offsets_sent"`` (before EndTxn), ``"committing"``
(``commit_transaction`` is about to be called; the hook may start a timer to hit the EndTxn in
flight) and ``"committed"``.

After the heal, ``TxnPipeline.final`` records in ``History.txn`` only independent reads: the
output log read ``read_committed`` and ``read_uncommitted``, the group's committed offsets, and
the output partitions whose last stable offset stayed below the high watermark. The verdicts
(``TXN_SAFETY``) are pure functions of them and of the input log (the checker's final read):

- ``txn_lost``: an input value without its output in the read_committed log;
- ``txn_duplicate``: an input value whose output is in the read_committed log more than once;
- ``txn_aborted_read`` (G1a): a read_committed record of a transaction that has records in the
  log that read_committed does not return (partly visible), or that its producer aborted;
- ``txn_offsets_committed_missing``: an input record below the group's committed offset whose
  output is not visible (offsets committed, output lost);
- ``txn_output_beyond_offsets``: a visible output of an input record at or above the committed
  offset (would be produced again by a restart);
- ``txn_hanging``: an output partition whose LSO stayed below its high watermark after the heal.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.e2e.checker.history import TP, FinalRead, History, encode_value, parse_value
from tests.e2e.checker.reads import confluent_read
from tests.e2e.checker.timeline import Timeline
from tests.e2e.checker.verdicts import Anomaly, final_log, verdict

TXN_SAFETY = (
    "txn_lost",
    "txn_duplicate",
    "txn_aborted_read",
    "txn_offsets_committed_missing",
    "txn_output_beyond_offsets",
    "txn_hanging",
)
PHASES = ("produced", "offsets_sent", "committing", "committed")
INPUT = "in"
ON_PURPOSE = "on purpose"


def output_value(seq: int, tag: str) -> bytes:
    return f"out:{seq:09d}|{tag}".encode()


def parse_output(value: bytes | None) -> tuple[int, str] | None:
    """(input seq, transaction tag) of an output value."""
    if not value or not value.startswith(b"out:"):
        return None
    seq, _, tag = value[4:].decode(errors="replace").partition("|")
    return (int(seq), tag) if seq.isdigit() else None


@dataclass(slots=True)
class TxnHistory:
    """What the transactional verdicts read: independent reads after the heal, plus the
    transactions the producers aborted themselves (definite outcomes)."""

    output_topic: str
    group: str
    committed_read: FinalRead | None = None
    uncommitted_read: FinalRead | None = None
    committed_offsets: dict[TP, int] = field(default_factory=dict)
    hanging: dict[TP, tuple[int, int]] = field(default_factory=dict)  # tp -> (LSO, HW)
    aborted_tags: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)


class _Worker(threading.Thread):
    def __init__(self, pipeline: TxnPipeline, name: str) -> None:
        super().__init__(name=f"txn-{name}", daemon=True)
        self.p = pipeline
        self.wname = name
        self.txn_id = f"{pipeline.group}-{name}"
        self.incarnation = 0
        self.txn_no = 0
        self.rebalanced = False
        self.error: BaseException | None = None
        self.producer: Producer | None = None

    def _new_producer(self) -> Producer:
        if self.producer is not None:
            with contextlib.suppress(Exception):
                self.producer.flush(1)
        self.incarnation += 1
        while True:
            prod = Producer(
                {
                    "bootstrap.servers": self.p.bootstrap,
                    "transactional.id": self.txn_id,
                    "transaction.timeout.ms": 20000,
                    "log_level": 2,
                }
            )
            try:
                prod.init_transactions(30)
                self.p.note(f"{self.txn_id} incarnation {self.incarnation} ready")
                return prod
            except KafkaException as exc:
                self.p.note(f"{self.txn_id} init_transactions: {exc.args[0]}")
                if self.p.stopping.is_set():
                    raise
                time.sleep(0.5)

    def _rebalance(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.rebalanced = True

    def _rewind(self, consumer: Consumer) -> None:
        """Back to the group's committed offsets (what the aborted transaction read is read
        again)."""
        while not self.p.stopping.is_set():
            try:
                parts = consumer.assignment()
                for tp in consumer.committed(parts, timeout=15):
                    tp.offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    consumer.seek(tp)
                return
            except KafkaException as exc:
                self.p.note(f"{self.wname} rewind: {exc.args[0]}")
                time.sleep(0.5)

    def _hook(self, phase: str) -> None:
        hook = self.p.phase_hook
        if hook is not None and self.wname == self.p.hooked_worker:
            hook(phase, self)

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.p.bootstrap,
                "group.id": self.p.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": 10000,
                "log_level": 2,
            }
        )
        try:
            self.producer = self._new_producer()
            consumer.subscribe(
                [self.p.input_topic], on_assign=self._rebalance, on_revoke=self._rebalance
            )
            while not self.p.stopping.is_set():
                self.rebalanced = False
                msgs = [m for m in consumer.consume(self.p.batch, 0.5) if m.error() is None]
                if self.rebalanced:
                    self._rewind(consumer)
                    continue
                if msgs:
                    self._transaction(consumer, msgs)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
            self.p.note(f"{self.wname} crashed: {exc!r}")
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def _transaction(self, consumer: Consumer, msgs: list) -> None:
        assert self.producer is not None
        self.txn_no += 1
        tag = f"{self.wname}.{self.incarnation}.{self.txn_no}"
        prod = self.producer
        try:
            prod.begin_transaction()
            for m in msgs:
                parsed = parse_value(m.value())
                assert parsed is not None and parsed[0] == INPUT, m.value()
                seq = parsed[1]
                prod.produce(
                    self.p.output_topic,
                    value=output_value(seq, tag),
                    partition=seq % self.p.output_partitions,
                )
            self._hook("produced")
            prod.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            self._hook("offsets_sent")
            if self.p.every_abort and self.txn_no % self.p.every_abort == 0:
                prod.abort_transaction(30)
                self.p.aborted(tag, ON_PURPOSE)
                self._rewind(consumer)
                return
            self._hook("committing")
            self._commit(prod)
            self.p.count("committed")
            self._hook("committed")
        except KafkaException as exc:
            self._recover(consumer, tag, exc.args[0])

    def _commit(self, prod: Producer) -> None:
        for _ in range(20):
            try:
                prod.commit_transaction(30)
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if not err.retriable() or err.txn_requires_abort() or err.fatal():
                    raise
                self.p.note(f"{self.wname} commit retried: {err}")
        prod.commit_transaction(30)

    def _recover(self, consumer: Consumer, tag: str, err: KafkaError) -> None:
        self.p.note(f"{self.wname} transaction {tag} failed: {err}")
        self.p.count("failed (" + ("fatal" if err.fatal() else err.name()) + ")")
        if not err.fatal():
            try:
                self.producer.abort_transaction(30)  # type: ignore[union-attr]
                self.p.aborted(tag, str(err))
            except KafkaException as exc:
                self.p.note(f"{self.wname} abort of {tag} failed: {exc.args[0]}")
                self.producer = self._new_producer()
        else:
            self.producer = self._new_producer()
        self._rewind(consumer)


class TxnPipeline:
    """Consume-transform-produce under faults; see the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        input_topic: str,
        output_topic: str,
        history: History,
        timeline: Timeline,
        *,
        group: str = "txn-pipeline",
        workers: int = 2,
        batch: int = 250,
        every_abort: int = 10,
        input_partitions: int = 6,
        output_partitions: int = 6,
    ) -> None:
        self.bootstrap = bootstrap
        self.input_topic = input_topic
        self.output_topic = output_topic
        self.input_partitions = input_partitions
        self.output_partitions = output_partitions
        self.fed = 0
        self.history = history
        self.timeline = timeline
        self.group = group
        self.batch = batch
        self.every_abort = every_abort
        self.stopping = threading.Event()
        self.phase_hook: Callable[[str, _Worker], None] | None = None
        self.hooked_worker = "w0"
        self.txn = history.txn = TxnHistory(output_topic, group)
        self._lock = threading.Lock()
        self.workers = [_Worker(self, f"w{i}") for i in range(workers)]

    def note(self, text: str) -> None:
        self.timeline.note("txn", text)

    def at_phase(
        self, phase: str, action: Callable[[], None], *, delay: float = 0.0, timeout: float = 60.0
    ) -> bool:
        """Run ``action`` when the hooked worker reaches ``phase`` next (in its thread, so
        the transaction waits for it; with ``delay``, from a timer that long after, e.g. while
        its EndTxn is in flight). False when the phase did not come within ``timeout``."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        fired = threading.Event()

        def hook(at: str, worker: _Worker) -> None:
            if at != phase or fired.is_set():
                return
            self.phase_hook = None
            self.note(f"{worker.wname} at {phase}: fault")
            if delay:
                threading.Timer(delay, action).start()
            else:
                action()
            fired.set()

        self.phase_hook = hook
        if not fired.wait(timeout):
            self.phase_hook = None
            return False
        return True

    def count(self, what: str) -> None:
        with self._lock:
            self.txn.counts[what] += 1

    def aborted(self, tag: str, why: str) -> None:
        with self._lock:
            self.txn.aborted_tags.add(tag)
            self.txn.counts["aborted on purpose" if why == ON_PURPOSE else "aborted on error"] += 1
        self.note(f"aborted {tag}: {why}")

    def feed(self, count: int) -> None:
        """Write the next ``count`` input values ``in:<seq>`` (to partition seq % partitions),
        idempotently; feeding in steps keeps the pipeline busy while faults hit it."""
        prod = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 20,
                "log_level": 2,
            }
        )
        failed: list[str] = []

        def report(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                failed.append(str(err))

        first, self.fed = self.fed, self.fed + count
        for seq in range(first, self.fed):
            while True:
                try:
                    prod.produce(
                        self.input_topic,
                        value=encode_value(INPUT, seq),
                        partition=seq % self.input_partitions,
                        on_delivery=report,
                    )
                    break
                except BufferError:
                    prod.poll(0.1)
        if prod.flush(120) or failed:
            raise RuntimeError(f"feeding the input failed: {failed[:3]}")
        self.note(f"fed input records {first} to {self.fed - 1}")

    def start(self) -> None:
        for w in self.workers:
            w.start()

    def wait_done(self, ends: dict[TP, int], timeout: float) -> bool:
        """Until the group's committed offsets reach the input's ends."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "log_level": 2})
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(KafkaException):
                    got = c.committed([TopicPartition(*tp) for tp in ends], timeout=10)
                    done = {(t.topic, t.partition): t.offset for t in got}
                    if all(done[tp] >= end for tp, end in ends.items()):
                        return True
                time.sleep(0.5)
            return False
        finally:
            c.close()

    def stop(self) -> list[str]:
        """Stop the workers; returns the errors of those that crashed."""
        self.stopping.set()
        for w in self.workers:
            w.join(120)
        return [f"{w.wname}: {w.error!r}" for w in self.workers if w.error is not None]

    def final(self, input_tps: list[TP], timeout: float = 60.0) -> None:
        """The independent reads the verdicts judge (after the workers stopped)."""
        out_tps = [(self.output_topic, p) for p in range(self.output_partitions)]
        self.txn.hanging = stuck_lso(self.bootstrap, out_tps, timeout)
        self.txn.committed_read = confluent_read(
            self.bootstrap, out_tps, timeout, isolation="read_committed"
        )
        self.txn.uncommitted_read = confluent_read(
            self.bootstrap, out_tps, timeout, isolation="read_uncommitted"
        )
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "log_level": 2})
        try:
            got = c.committed([TopicPartition(*tp) for tp in input_tps], timeout=30)
            self.txn.committed_offsets = {(t.topic, t.partition): t.offset for t in got}
        finally:
            c.close()


def stuck_lso(bootstrap: str, tps: list[TP], timeout: float) -> dict[TP, tuple[int, int]]:
    """The partitions whose last stable offset stays below the high watermark for
    ``timeout`` seconds: tp -> (LSO, HW). ListOffsets read_committed vs read_uncommitted."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def latest(level: IsolationLevel) -> dict[TP, int]:
        req = {TopicPartition(*tp): OffsetSpec.latest() for tp in tps}
        futs = admin.list_offsets(req, isolation_level=level, request_timeout=15)
        return {(k.topic, k.partition): f.result().offset for k, f in futs.items()}

    deadline = time.monotonic() + timeout
    stuck: dict[TP, tuple[int, int]] = {}
    while time.monotonic() < deadline:
        try:
            lso = latest(IsolationLevel.READ_COMMITTED)
            hw = latest(IsolationLevel.READ_UNCOMMITTED)
        except KafkaException:
            time.sleep(0.5)
            continue
        stuck = {tp: (lso[tp], hw[tp]) for tp in tps if lso[tp] < hw[tp]}
        if not stuck:
            return {}
        time.sleep(0.5)
    return stuck


def coordinator_states(host: str, admin_port: int, timeout: float = 1.0) -> dict[str, float]:
    """A transaction coordinator's transactional ids by state (``PrepareCommit``...), from its
    ``/metrics``: how a fault is timed inside the EndTxn window (prepared, markers not done)."""
    import urllib.request

    url = f"http://{host}:{admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 - local admin port
        text = answer.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith('kafkapy_transaction_coordinator_transactional_ids{state="'):
            state = line.split('"')[1]
            out[state] = float(line.rsplit(" ", 1)[1])
    return out


# ---- verdicts ----------------------------------------------------------------------------
def _visible(h: History) -> dict[int, list[tuple[TP, int, str]]]:
    """input seq -> [(tp, offset, tag)] of the read_committed output."""
    out: dict[int, list[tuple[TP, int, str]]] = defaultdict(list)
    assert h.txn is not None and h.txn.committed_read is not None
    for tp, recs in h.txn.committed_read.records.items():
        for off, value in recs:
            parsed = parse_output(value)
            if parsed is not None:
                out[parsed[0]].append((tp, off, parsed[1]))
    return out


def _inputs(h: History) -> dict[int, tuple[TP, int]]:
    """input seq -> (tp, offset) from the checker's own read of the input log."""
    out: dict[int, tuple[TP, int]] = {}
    for tp, recs in final_log(h).records.items():
        for off, value in recs:
            parsed = parse_value(value)
            if parsed is not None and parsed[0] == INPUT:
                out[parsed[1]] = (tp, off)
    return out


def _judged(h: History) -> bool:
    return h.txn is not None and h.txn.committed_read is not None


@verdict("txn_lost")
def txn_lost(h: History) -> tuple[list[Anomaly], int]:
    if not _judged(h):
        return [], 0
    visible, inputs = _visible(h), _inputs(h)
    missing = sorted(seq for seq in inputs if seq not in visible)
    return [
        Anomaly("txn_lost", f"input {seq} at {inputs[seq]} has no committed output")
        for seq in missing
    ], len(inputs)


@verdict("txn_duplicate")
def txn_duplicate(h: History) -> tuple[list[Anomaly], int]:
    if not _judged(h):
        return [], 0
    visible = _visible(h)
    return [
        Anomaly("txn_duplicate", f"input {seq} output {len(where)} times: {where[:3]}")
        for seq, where in sorted(visible.items())
        if len(where) > 1
    ], sum(len(w) for w in visible.values())


@verdict("txn_aborted_read")
def txn_aborted_read(h: History) -> tuple[list[Anomaly], int]:
    """G1a: read_committed returns a record of a transaction that is only partly visible
    (some of its records in the log are not returned) or that its producer aborted."""
    if not _judged(h):
        return [], 0
    assert h.txn is not None and h.txn.uncommitted_read is not None
    in_log: Counter[str] = Counter()
    for recs in h.txn.uncommitted_read.records.values():
        for _off, value in recs:
            parsed = parse_output(value)
            if parsed is not None:
                in_log[parsed[1]] += 1
    seen: Counter[str] = Counter()
    first: dict[str, tuple[TP, int]] = {}
    for where in _visible(h).values():
        for tp, off, tag in where:
            seen[tag] += 1
            first.setdefault(tag, (tp, off))
    out = []
    for tag, n in sorted(seen.items()):
        if tag in h.txn.aborted_tags:
            out.append(
                Anomaly("txn_aborted_read", f"{tag} was aborted; {n} visible at {first[tag]}")
            )
        elif n != in_log[tag]:
            out.append(
                Anomaly(
                    "txn_aborted_read",
                    f"{tag}: {n} of its {in_log[tag]} records in the log visible, at {first[tag]}",
                )
            )
    return out, sum(in_log.values())


@verdict("txn_offsets_committed_missing")
def txn_offsets_committed_missing(h: History) -> tuple[list[Anomaly], int]:
    if not _judged(h):
        return [], 0
    assert h.txn is not None
    visible, inputs = _visible(h), _inputs(h)
    out, checked = [], 0
    for seq, (tp, off) in sorted(inputs.items()):
        if off < h.txn.committed_offsets.get(tp, -1):
            checked += 1
            if seq not in visible:
                committed = h.txn.committed_offsets[tp]
                out.append(
                    Anomaly(
                        "txn_offsets_committed_missing",
                        f"{tp} committed {committed} but input {seq} at {off} has no output",
                    )
                )
    return out, checked


@verdict("txn_output_beyond_offsets")
def txn_output_beyond_offsets(h: History) -> tuple[list[Anomaly], int]:
    if not _judged(h):
        return [], 0
    assert h.txn is not None
    visible, inputs = _visible(h), _inputs(h)
    out = []
    for seq in sorted(visible):
        if seq not in inputs:
            out.append(Anomaly("txn_output_beyond_offsets", f"output of unknown input {seq}"))
            continue
        tp, off = inputs[seq]
        if off >= h.txn.committed_offsets.get(tp, -1):
            out.append(
                Anomaly(
                    "txn_output_beyond_offsets",
                    f"input {seq} at {tp}@{off} is output but the group committed "
                    f"{h.txn.committed_offsets.get(tp)}",
                )
            )
    return out, len(visible)


@verdict("txn_hanging")
def txn_hanging(h: History) -> tuple[list[Anomaly], int]:
    if not _judged(h):
        return [], 0
    assert h.txn is not None and h.txn.committed_read is not None
    out = [
        Anomaly("txn_hanging", f"{tp}: LSO {lso} < high watermark {hw} after the heal")
        for tp, (lso, hw) in sorted(h.txn.hanging.items())
    ]
    if h.txn.committed_read.error:
        out.append(Anomaly("txn_hanging", f"read_committed: {h.txn.committed_read.error}"))
    return out, len(h.txn.committed_read.records)
