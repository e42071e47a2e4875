"""The one fault checker of kafka-py's e2e tests (design brief §14). Every fault test uses it.

A run::

    from tests.e2e.checker import Checker, Schedule, evidence_dir

    with Checker(cluster, "chaos", evidence=evidence_dir(tmp_path, "chaos")) as checker:
        checker.create_topic(partitions=6, config={"min.insync.replicas": "2"})
        checker.start()                               # writers, consumer group, monitor
        nemesis = checker.run_schedule(Schedule.mixed(seed, checker.layout(), duration=90))
        outcome = checker.finish(heal=nemesis.heal)   # prints the summary table
    outcome.assert_ok()                               # 0 of every safety verdict, all live

Your own faults (ElectLeaders, a partition reassignment...) go between ``start()`` and
``finish()`` instead of (or besides) ``run_schedule``: ``checker.fault("kill -9 storage-1")``
lists each in the summary and the timeline, ``checker.note("...")`` any other step. The
``with`` block writes the evidence even when the test fails before ``finish()``. While the
workload runs a monitor samples which controller acts; ``finish(max_controller_gap=12)``
fails liveness when none acted for longer while ZooKeeper was running. ``Checker(writers=[("c0", "confluent-kafka", 300.0), ...])`` picks the
producers (``"confluent-kafka"``, ``"kafka-python"``, ``"aiokafka"``), ``group=None`` drops the
consumer group. ``outcome.verdicts["duplicate"].anomalies`` etc. hold the details.

Modules, one job each:

- ``history``  — the recorded run: every write and its delivery report, the group's reads and
  commits in one global order, the final reads. Values are ``b"<writer>:<seq>"``.
- ``workload`` — writers (idempotent, acks=all): ``ConfluentWriter`` (librdkafka, 5 in flight),
  ``KafkaPythonWriter``, ``AioKafkaWriter``; a fatal producer error starts a new incarnation.
- ``group``    — ``ConsumerGroup``: confluent-kafka members committing after processing.
- ``txn``      — ``TxnPipeline`` (``checker.transactions(output_topic, records)``): consume-
  transform-produce with transactional producers and read_committed consumers, faults timed by
  its phases (``pipeline.at_phase("committing", kill, delay=0.005)``), and the ``txn_*``
  verdicts (``TXN_SAFETY``: lost, duplicate, aborted read, offsets vs output, hanging LSO) from
  the output read read_committed and read_uncommitted after the heal.
- ``nemesis``  — ``Fault``/``Schedule`` (seeded: kill -9, SIGSTOP/SIGCONT, SIGTERM + restart of
  any service, the active controller from ``/controller``, ZooKeeper paused past the session
  timeout) and the ``Nemesis`` that applies it, supervising the cluster between faults.
- ``monitor``  — during the run: which controller acts, sampled twice a second.
- ``liveness`` — after the heal: every process up, exactly one acting controller, every
  partition led with a full ISR, every coordinator shard placed (plus, in ``Checker``: writers
  acked after the heal, the group read to the end and can commit, the final reads completed).
- ``reads``    — two independent full reads (confluent-kafka and kafka-python).
- ``verdicts`` — lost, duplicate, reordered, inconsistent, group_skipped,
  group_read_not_in_log, group_commit_lost: pure functions of a ``History``.
- ``timeline`` — the run's events merged with the services' leader/ISR/election/truncation
  log lines; ``report`` — the summary table and the evidence directory
  (``$KAFKAPY_CHECKER_EVIDENCE`` or the test's tmp path): summary.txt, anomalies.json,
  liveness.json, schedule.json, timeline.txt, history/, service-logs/.

Extension points: a new anomaly registers ``@verdict("name")`` (``History -> (anomalies,
checked)``), recording what it needs in ``History`` (e.g. the isolation level of a read for
aborted reads of transactions); a new liveness condition is one more entry of
``liveness.CLUSTER_CHECKS``; a new fault (a zone cut with nftables in kube-sim) is a new action
in ``nemesis`` with its class added to ``FAULT_CLASSES``.
"""

from tests.e2e.checker.history import History, encode_value, parse_value
from tests.e2e.checker.liveness import CLUSTER_CHECKS, LivenessResult, wait_live
from tests.e2e.checker.nemesis import FAULT_CLASSES, Fault, Nemesis, Schedule
from tests.e2e.checker.report import EVIDENCE_ENV, Outcome, evidence_dir
from tests.e2e.checker.run import DEFAULT_WRITERS, Checker
from tests.e2e.checker.txn import TXN_SAFETY, TxnPipeline
from tests.e2e.checker.verdicts import SAFETY, VERDICTS, Anomaly, check, verdict

__all__ = [
    "CLUSTER_CHECKS",
    "DEFAULT_WRITERS",
    "EVIDENCE_ENV",
    "FAULT_CLASSES",
    "SAFETY",
    "TXN_SAFETY",
    "TxnPipeline",
    "VERDICTS",
    "Anomaly",
    "Checker",
    "Fault",
    "History",
    "LivenessResult",
    "Nemesis",
    "Outcome",
    "Schedule",
    "check",
    "encode_value",
    "evidence_dir",
    "parse_value",
    "verdict",
    "wait_live",
]
