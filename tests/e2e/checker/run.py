"""``Checker``: one run of writers + a consumer group against a LocalCluster, with faults in
between, ended by a heal, liveness checks, two independent full reads and the verdicts."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from services.cli.local_cluster import LocalCluster
from tests.e2e.checker.client_logs import ClientLogs
from tests.e2e.checker.group import ConsumerGroup
from tests.e2e.checker.history import TP, History
from tests.e2e.checker.liveness import LivenessResult, wait_live
from tests.e2e.checker.monitor import ControllerMonitor
from tests.e2e.checker.nemesis import Nemesis, Schedule
from tests.e2e.checker.reads import confluent_read, kafka_python_read
from tests.e2e.checker.report import Outcome
from tests.e2e.checker.timeline import Timeline, write_timeline
from tests.e2e.checker.txn import TxnPipeline
from tests.e2e.checker.verdicts import VERDICTS, check
from tests.e2e.checker.workload import WRITERS, Writer
from tests.integration.kafka_support import wait_for_topic

#: (writer name, client, records per second)
DEFAULT_WRITERS: tuple[tuple[str, str, float], ...] = (
    ("c0", "confluent-kafka", 250.0),
    ("c1", "confluent-kafka", 250.0),
    ("k0", "kafka-python", 60.0),
    ("a0", "aiokafka", 60.0),
)


class Checker:
    """Drives one run. Typical use::

        checker = Checker(cluster, "chaos", evidence=evidence_dir(tmp_path, "chaos"))
        checker.create_topic(partitions=6, config={"min.insync.replicas": "2"})
        checker.start()                        # writers and the consumer group
        nemesis = checker.run_schedule(Schedule.mixed(seed, checker.layout()))
        outcome = checker.finish(heal=nemesis.heal)
        outcome.assert_ok()

    Faults of your own go between ``start()`` and ``finish()``; call ``checker.fault(text)``
    for each (``checker.note(text)`` for other steps) so the summary and the timeline show them.
    Used as ``with Checker(...) as checker:``, a test that fails before ``finish()`` still
    leaves its timeline, history and service logs in the evidence directory (``abort``).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        topic: str,
        *,
        evidence: Path | None = None,
        writers: Sequence[tuple[str, str, float]] = DEFAULT_WRITERS,
        writer_config: Mapping[str, Mapping[str, Any]] | None = None,
        group: str | None = "checker-group",
        group_members: int = 2,
        group_config: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partitions = 0
        self.evidence = evidence
        self.history = History()
        self.timeline = Timeline()
        self.seed = seed
        self._writer_specs = list(writers)
        self._writer_config = dict(writer_config or {})
        self.writers: list[Writer] = []
        self.group_name = group
        self.group_members = group_members
        self.group_config = dict(group_config or {})
        self.group: ConsumerGroup | None = None
        self.nemesis: Nemesis | None = None
        self._schedule: Schedule | None = None
        self.own_faults: list[str] = []
        self._started_at = time.monotonic()
        self.monitor = ControllerMonitor(cluster, self.timeline)
        self.pipeline: TxnPipeline | None = None
        self._finished = False
        self._client_logs: ClientLogs | None = None

    # ---- as a context: evidence even when the test fails before finish() -------------
    def __enter__(self) -> Checker:
        if self.evidence is not None:
            self._client_logs = ClientLogs(self.evidence / "client.log")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        try:
            if exc is not None and not self._finished:
                self.abort(f"{exc_type.__name__ if exc_type else 'error'}: {exc}")
        finally:
            if self._client_logs is not None:
                self._client_logs.close()

    def abort(self, why: str) -> None:
        """Stop everything without judging and write what was recorded (timeline, history,
        service logs) to the evidence directory."""
        self.note(f"ABORT: {why}")
        self.monitor.stop()
        if self.nemesis is not None:
            self.nemesis.stop()
        for w in self.writers:
            with contextlib.suppress(Exception):
                w.stop(flush_timeout=5)
        if self.group is not None:
            with contextlib.suppress(Exception):
                self.group.stop()
        if self.pipeline is not None:
            self.pipeline.stop()
        if self.evidence is not None:
            self.evidence.mkdir(parents=True, exist_ok=True)
            (self.evidence / "ABORTED.txt").write_text(why + "\n")
            write_timeline(self.evidence / "timeline.txt", self.timeline, self.cluster.logs_dir)
            self.history.dump(self.evidence / "history")
            if self.cluster.logs_dir.exists():
                shutil.copytree(
                    self.cluster.logs_dir, self.evidence / "service-logs", dirs_exist_ok=True
                )
            print(f"\nchecker aborted ({why}); evidence: {self.evidence}")  # noqa: T201

    # ---- set-up ---------------------------------------------------------------------
    def layout(self) -> dict[str, int]:
        """role -> number of processes (for ``Schedule.mixed``)."""
        out: dict[str, int] = {}
        for p in self.cluster.processes():
            out[p.role] = out.get(p.role, 0) + 1
        return out

    def create_topic(
        self,
        partitions: int = 6,
        replication_factor: int = 3,
        config: Mapping[str, str] | None = None,
    ) -> None:
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        new = NewTopic(self.topic, partitions, replication_factor, config=dict(config or {}))
        admin.create_topics([new])[self.topic].result(60)
        wait_for_topic(admin, self.topic, partitions, timeout=60)
        self.partitions = partitions

    def use_topic(self, partitions: int) -> None:
        """Run on an existing topic of ``partitions`` partitions."""
        self.partitions = partitions

    @property
    def tps(self) -> list[TP]:
        return [(self.topic, p) for p in range(self.partitions)]

    def note(self, text: str, source: str = "test") -> None:
        self.timeline.note(source, text)

    def fault(self, text: str) -> None:
        """Record a fault the test applied itself (listed in the summary and the timeline)."""
        self.own_faults.append(text)
        self.timeline.note("nemesis", f"FAULT {text}")

    # ---- the run --------------------------------------------------------------------
    def start(self) -> None:
        """Start the writers and the consumer group."""
        if not self.partitions:
            raise ValueError("create_topic() or use_topic() first")
        bootstrap = self.cluster.bootstrap
        self._started_at = time.monotonic()
        for name, client, rate in self._writer_specs:
            w = WRITERS[client](
                name,
                bootstrap,
                self.topic,
                self.partitions,
                self.history,
                self.timeline,
                rate=rate,
                config=self._writer_config.get(client),
                debug_dir=self.evidence,
            )
            self.writers.append(w)
            w.start()
        if self.group_name and self.group_members:
            self.group = ConsumerGroup(
                self.group_name,
                bootstrap,
                self.topic,
                self.history,
                self.timeline,
                members=self.group_members,
                config=self.group_config,
            )
            self.group.start()
        self.monitor.start()
        self.note(f"workload started: {len(self.writers)} writers, {self.group_members} members")

    def transactions(self, output_topic: str, records: int = 0, **pipeline: Any) -> TxnPipeline:
        """Start a consume-transform-produce pipeline from the checker's topic into
        ``output_topic`` (``txn.TxnPipeline``; the keyword arguments go to it) after feeding it
        ``records`` input values (``pipeline.feed(n)`` feeds more later). ``finish`` waits until
        the group committed the whole input, reads the output read_committed and
        read_uncommitted and runs the ``txn_*`` verdicts."""
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        topics = admin.list_topics(output_topic, timeout=30).topics
        self.pipeline = TxnPipeline(
            self.cluster.bootstrap,
            self.topic,
            output_topic,
            self.history,
            self.timeline,
            input_partitions=self.partitions,
            output_partitions=len(topics[output_topic].partitions),
            **pipeline,
        )
        if records:
            self.pipeline.feed(records)
        self.pipeline.start()
        self.note(f"transactional pipeline started: {len(self.pipeline.workers)} workers")
        return self.pipeline

    def run_schedule(self, schedule: Schedule) -> Nemesis:
        """Apply ``schedule`` (blocks until its last fault ended); returns the nemesis, whose
        ``heal`` goes to ``finish``."""
        self._schedule = schedule
        self.seed = schedule.seed
        self.nemesis = Nemesis(self.cluster, schedule, self.timeline)
        self.note(f"nemesis starts: seed {schedule.seed}, {len(schedule.faults)} faults")
        self.nemesis.start()
        self.nemesis.join(schedule.span * 3 + 300)
        return self.nemesis

    def finish(
        self,
        *,
        heal: Callable[[], None] | None = None,
        liveness_timeout: float = 60.0,
        progress_timeout: float = 20.0,
        drain_timeout: float = 60.0,
        read_timeout: float = 60.0,
        max_controller_gap: float = 12.0,
    ) -> Outcome:
        """Heal, check liveness, stop the workload, read everything twice, judge, report.

        ``max_controller_gap``: the longest time without an acting controller, while
        ZooKeeper ran, allowed between ``start()`` and the heal (the monitor's samples). The
        default, 4 sessions of the local cluster's 3 s, covers what a fault explains: the
        active controller stopped or killed until its session expires and the standby is
        elected, or both controllers hit one after the other; a longer gap is a controller
        that did not come back (issue 12 §1)."""
        self._finished = True
        healed_at = time.monotonic()
        self.monitor.stop()
        if heal is not None:
            heal()
        self.note("heal done; checking liveness")
        liveness = [self._controller_gaps(max_controller_gap)]
        liveness += wait_live(self.cluster, healed_at, liveness_timeout)
        liveness.append(self._writers_progress(healed_at, progress_timeout))
        for w in self.writers:
            try:
                w.stop()
            except RuntimeError as exc:  # a crashed writer is a finding, not the end of the run
                liveness.append(
                    LivenessResult(f"writer {w.name} ran to the end", False, repr(exc.__cause__))
                )
        self.note("writers stopped")
        liveness += self._drain_group(drain_timeout)
        liveness += self._drain_pipeline(drain_timeout * 2, read_timeout)
        reads = [
            confluent_read(self.cluster.bootstrap, self.tps, read_timeout),
            kafka_python_read(self.cluster.bootstrap, self.tps, read_timeout),
        ]
        self.history.final_reads = reads
        self.note("final reads done")
        liveness.append(
            LivenessResult(
                "final reads complete",
                all(r.error is None for r in reads),
                "; ".join(f"{r.reader}: {r.error}" for r in reads if r.error),
            )
        )
        outcome = Outcome(
            verdicts=check(
                self.history,
                [n for n in VERDICTS if self.pipeline is not None or not n.startswith("txn_")],
            ),
            liveness=liveness,
            history=self.history,
            faults=list(self.nemesis.applied) if self.nemesis else [],
            own_faults=list(self.own_faults),
            unexpected_exits=list(self.nemesis.unexpected_exits) if self.nemesis else [],
            seed=self.seed,
            fault_seconds=(
                self.nemesis.ended_at - self.nemesis.started_at
                if self.nemesis and self.nemesis.applied
                else healed_at - self._started_at
            ),
            writers={w.name: w.client for w in self.writers},
        )
        if self.evidence is not None:
            outcome.write_evidence(
                self.evidence,
                self.timeline,
                self.cluster.logs_dir,
                self._schedule.as_json() if self._schedule else None,
            )
        print("\n" + outcome.table())  # noqa: T201 - the summary belongs in the test output
        return outcome

    # ---- phases of finish -----------------------------------------------------------
    def _controller_gaps(self, bound: float) -> LivenessResult:
        gap = self.monitor.longest_gap()
        name = f"a controller acted (gaps <= {bound:g}s)"
        if gap is None:
            return LivenessResult(
                name, True, f"no gap in {self.monitor.samples} samples", measure=True
            )
        stamp = time.strftime("%H:%M:%S", time.gmtime(gap.start))
        detail = (
            f"longest gap {gap.zk_up:.1f}s with ZooKeeper running ({gap.seconds:.1f}s in all) "
            f"from {stamp} UTC; {len(self.monitor.gaps)} gaps in {self.monitor.samples} samples"
        )
        return LivenessResult(name, gap.zk_up <= bound, detail, gap.zk_up, measure=True)

    def _writers_progress(self, since: float, timeout: float) -> LivenessResult:
        """Every writer gets new acknowledgements after the heal."""
        base = {w.name: w.acks for w in self.writers}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stuck = [w.name for w in self.writers if w.acks <= base[w.name]]
            if not stuck:
                return LivenessResult(
                    "writers acked after the heal", True, seconds=time.monotonic() - since
                )
            time.sleep(0.2)
        return LivenessResult(
            "writers acked after the heal", False, f"no new ack within {timeout:.0f}s: {stuck}"
        )

    def _drain_group(self, timeout: float) -> list[LivenessResult]:
        if self.group is None:
            return []
        started = time.monotonic()
        out: list[LivenessResult] = []
        try:
            ends = self._end_offsets()
        except KafkaException as exc:
            caught, detail = False, f"no end offsets: {exc.args[0]}"
        else:
            caught = self.group.wait_caught_up(ends, self.history, timeout)
            detail = "" if caught else f"ends {ends}, read {self.group.read} in {timeout:.0f}s"
        try:
            self.group.stop()
        except RuntimeError as exc:
            out.append(LivenessResult("group members ran to the end", False, repr(exc.__cause__)))
        self.note("group stopped")
        took = time.monotonic() - started if caught else None
        out.append(LivenessResult("group read to the end", caught, detail, took))
        out.append(self._group_commits(timeout))
        return out

    def _drain_pipeline(self, timeout: float, read_timeout: float) -> list[LivenessResult]:
        if self.pipeline is None:
            return []
        started = time.monotonic()
        done = self.pipeline.wait_done(self._end_offsets(), timeout)
        took = time.monotonic() - started if done else None
        out = [LivenessResult("pipeline committed the whole input", done, "", took)]
        crashed = self.pipeline.stop()
        out.append(
            LivenessResult("pipeline workers ran to the end", not crashed, "; ".join(crashed))
        )
        self.note("pipeline stopped")
        self.pipeline.final(self.tps, read_timeout)
        self.note("transactional reads done")
        return out

    def _end_offsets(self) -> dict[TP, int]:
        c = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "group.id": "checker-ends",
                "log_level": 2,
            }
        )
        try:
            return {
                tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=15)[1] for tp in self.tps
            }
        finally:
            c.close()

    def _group_commits(self, timeout: float) -> LivenessResult:
        """Fetch the group's committed offsets (into the history) and commit them again from
        a fresh client: the group can commit after the heal."""
        assert self.group_name is not None
        started = time.monotonic()
        deadline = started + timeout
        c = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "group.id": self.group_name,
                "enable.auto.commit": False,
                "log_level": 2,
            }
        )
        last = ""
        try:
            while time.monotonic() < deadline:
                try:
                    got = c.committed([TopicPartition(*tp) for tp in self.tps], timeout=10)
                    committed = {(t.topic, t.partition): t.offset for t in got if t.offset >= 0}
                    self.history.final_commits[self.group_name] = committed
                    again = [TopicPartition(t, p, o) for (t, p), o in committed.items()]
                    if again:
                        c.commit(offsets=again, asynchronous=False)
                    return LivenessResult(
                        f"group {self.group_name} can commit",
                        True,
                        seconds=time.monotonic() - started,
                    )
                except KafkaException as exc:
                    last = str(exc.args[0])
                    time.sleep(0.5)
        finally:
            c.close()
        return LivenessResult(f"group {self.group_name} can commit", False, last)
