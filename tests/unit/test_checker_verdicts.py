"""The fault checker's verdicts on hand-made histories: each one fires on its anomaly and on
nothing else; the schedule is reproducible and complete; the evidence timeline keeps the
services' leadership lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from services.cli.local_cluster import LocalCluster
from tests.e2e.checker import FAULT_CLASSES, SAFETY, Checker, Schedule, check, encode_value
from tests.e2e.checker.history import FinalRead, History
from tests.e2e.checker.liveness import LivenessResult
from tests.e2e.checker.monitor import stopped
from tests.e2e.checker.report import Outcome
from tests.e2e.checker.timeline import Timeline, service_events
from tests.integration.kafka_support import wait_for

T = "t"


def v(writer: str, seq: int) -> bytes:
    return encode_value(writer, seq)


def history(
    acked: dict[bytes, tuple[int, int | None]], *reads: dict[int, list[bytes | None]]
) -> History:
    """``acked``: value -> (partition, offset); each read: partition -> values at 0, 1, 2..."""
    h = History()
    for value, (p, off) in acked.items():
        writer, seq = value.decode().rsplit(":", 1)
        h.sent(writer, int(seq), T, p)
        h.delivered(value, p, off, None)
    for i, read in enumerate(reads):
        h.final_reads.append(
            FinalRead(f"r{i}", {(T, p): list(enumerate(vals)) for p, vals in read.items()})
        )
    return h


def counts(h: History) -> dict[str, int]:
    return {name: r.count for name, r in check(h).items()}


def only(h: History, name: str, n: int) -> None:
    got = counts(h)
    assert got[name] == n, check(h)[name].anomalies
    assert {k: c for k, c in got.items() if k != name and c} == {}, got


CLEAN_ACKS = {v("a", 0): (0, 0), v("a", 1): (0, 1), v("b", 0): (0, 2), v("a", 2): (1, 0)}
CLEAN_LOG = {0: [v("a", 0), v("a", 1), v("b", 0)], 1: [v("a", 2)]}


def test_a_clean_history_has_no_anomaly() -> None:
    h = history(CLEAN_ACKS, CLEAN_LOG, CLEAN_LOG)
    assert set(SAFETY) <= set(counts(h))
    assert all(c == 0 for c in counts(h).values()), counts(h)
    assert check(h)["lost"].checked == 4


def test_lost_fires_for_an_acknowledged_value_missing_from_the_log() -> None:
    log = {0: [v("a", 0), v("b", 0)], 1: [v("a", 2)]}
    acks = {**CLEAN_ACKS, v("b", 0): (0, 1), v("a", 1): (0, 9)}
    only(history(acks, log, log), "lost", 1)


def test_a_failed_or_unanswered_write_may_be_absent_or_present() -> None:
    h = history(CLEAN_ACKS, CLEAN_LOG, CLEAN_LOG)
    h.sent("a", 3, T, 1)  # unknown, absent
    h.sent("a", 4, T, 1)
    h.delivered(v("a", 4), 1, None, "timed out")  # failed, absent
    assert all(c == 0 for c in counts(h).values())


def test_duplicate_fires_for_a_value_stored_twice() -> None:
    log = {0: [v("a", 0), v("a", 1), v("a", 1), v("b", 0)], 1: [v("a", 2)]}
    acks = {**CLEAN_ACKS, v("b", 0): (0, 3)}
    h = history(acks, log, log)
    only(h, "duplicate", 1)
    assert "t/0@1 and again at t/0@2" in check(h)["duplicate"].anomalies[0].detail


def test_reordered_fires_when_a_writer_s_sequence_goes_back_in_a_partition() -> None:
    log = {0: [v("a", 1), v("a", 0), v("b", 0)], 1: [v("a", 2)]}
    acks = {**CLEAN_ACKS, v("a", 1): (0, 0), v("a", 0): (0, 1)}
    h = history(acks, log, log)
    only(h, "reordered", 1)
    assert (
        "a seq 0 at offset 1 after seq 1 at offset 0" in check(h)["reordered"].anomalies[0].detail
    )


def test_sequences_of_different_writers_and_partitions_interleave_freely() -> None:
    log = {0: [v("b", 5), v("a", 0), v("b", 6)], 1: [v("a", 2), v("b", 1)]}
    h = history({}, log, log)
    assert counts(h)["reordered"] == 0


def test_inconsistent_fires_when_the_two_reads_differ() -> None:
    other = {0: [v("a", 0), v("b", 0), v("a", 1)], 1: [v("a", 2), v("x", 0)]}
    h = history(CLEAN_ACKS, CLEAN_LOG, other)
    only(h, "inconsistent", 3)  # two offsets swapped, one offset only in the second read


def test_inconsistent_fires_when_the_acknowledged_offset_holds_another_value() -> None:
    acks = {**CLEAN_ACKS, v("b", 0): (0, 1)}  # acked at 1, stored at 2
    h = history(acks, CLEAN_LOG, CLEAN_LOG)
    only(h, "inconsistent", 1)
    assert "(which holds a:000000001)" in check(h)["inconsistent"].anomalies[0].detail


def test_an_ack_without_an_offset_is_checked_for_loss_and_duplicates_but_not_placed() -> None:
    """librdkafka's implicit ack (a later batch's success proves an earlier, "possibly
    persisted" one was stored) reports no offset: nothing to compare with the log's place, but
    the value must still be stored, and stored once."""
    acks = {**CLEAN_ACKS, v("b", 0): (0, None)}
    h = history(acks, CLEAN_LOG, CLEAN_LOG)
    assert all(c == 0 for c in counts(h).values()), counts(h)
    assert check(h)["inconsistent"].checked == 4 + 3  # 4 offsets of the two reads, 3 placed acks
    assert h.acked_without_offset() == 1
    gone = {0: [v("a", 0), v("a", 1)], 1: [v("a", 2)]}
    only(history(acks, gone, gone), "lost", 1)
    twice = {0: [v("a", 0), v("a", 1), v("b", 0), v("b", 0)], 1: [v("a", 2)]}
    only(history(acks, twice, twice), "duplicate", 1)


def group_history() -> History:
    h = history(CLEAN_ACKS, CLEAN_LOG, CLEAN_LOG)
    h.final_commits["g"] = {}
    return h


def test_group_skipped_fires_for_a_commit_past_an_unread_record() -> None:
    h = group_history()
    h.group_read("g", "m0", T, 0, 0, v("a", 0))
    h.group_read("g", "m1", T, 0, 2, v("b", 0))
    h.group_commit("g", "m1", [(T, 0, 3)])  # offset 1 never read
    h.group_read("g", "m0", T, 0, 1, v("a", 1))  # read only after the commit
    h.final_commits["g"] = {(T, 0): 3}
    only(h, "group_skipped", 1)
    assert "before reading offset 1" in check(h)["group_skipped"].anomalies[0].detail


def test_group_skipped_fires_for_a_commit_past_the_log_end() -> None:
    h = group_history()
    for off, val in enumerate(CLEAN_LOG[1]):
        h.group_read("g", "m0", T, 1, off, val)
    h.group_commit("g", "m0", [(T, 1, 5)])
    h.final_commits["g"] = {(T, 1): 5}
    only(h, "group_skipped", 1)


def test_reads_by_any_member_before_the_commit_count_and_failed_commits_do_not() -> None:
    h = group_history()
    h.group_read("g", "m0", T, 0, 0, v("a", 0))
    h.group_read("g", "m1", T, 0, 1, v("a", 1))
    h.group_commit("g", "m1", [(T, 0, 2)])
    h.group_commit("g", "m1", [(T, 0, 3)], error="REBALANCE_IN_PROGRESS")
    h.final_commits["g"] = {(T, 0): 2}
    assert all(c == 0 for c in counts(h).values()), counts(h)


def test_group_read_not_in_log_fires_for_a_record_the_final_log_lacks() -> None:
    h = group_history()
    h.group_read("g", "m0", T, 0, 0, v("a", 0))
    h.group_read("g", "m0", T, 0, 1, v("z", 7))  # the log holds a:1 there
    h.group_read("g", "m0", T, 1, 4, v("a", 9))  # beyond the log
    only(h, "group_read_not_in_log", 2)


def test_group_commit_lost_fires_when_the_committed_offset_went_back() -> None:
    h = group_history()
    for off, val in enumerate(CLEAN_LOG[0]):
        h.group_read("g", "m0", T, 0, off, val)
    h.group_commit("g", "m0", [(T, 0, 2)])
    h.group_commit("g", "m0", [(T, 0, 3)])
    h.final_commits["g"] = {(T, 0): 2}
    only(h, "group_commit_lost", 1)


def test_outcome_assert_ok_names_the_failures_and_prints_the_table() -> None:
    log = {0: [v("a", 0), v("a", 1)], 1: [v("a", 2)]}
    h = history(CLEAN_ACKS, log, log)
    live = [
        LivenessResult("one acting controller", False, "/controller=0 count={0: 0, 1: 0}"),
        LivenessResult("a controller acted", True, "longest gap 2.5s", 2.5, measure=True),
        LivenessResult("every partition led", True, "12 partitions", 1.25),
    ]
    outcome = Outcome(check(h), live, h, seed=7)
    with pytest.raises(AssertionError) as err:
        outcome.assert_ok()
    text = str(err.value)
    assert "{'lost': 1}" in text and "one acting controller" in text and "seed 7" in text
    assert "b:000000000 acked at t/0@2, not in the final log" in text
    assert "longest gap 2.5s" in text and "after 1.2s" in text and "12 partitions" not in text
    Outcome(check(history(CLEAN_ACKS, CLEAN_LOG, CLEAN_LOG)), [], h).assert_ok()


LAYOUT = {"storage": 3, "controller": 2, "gateway": 2, "group_coordinator": 2}


def test_the_mixed_schedule_is_seeded_complete_and_long_enough() -> None:
    a = Schedule.mixed(42, LAYOUT, duration=90, session_timeout_s=3, zookeeper_pauses=3)
    assert a == Schedule.mixed(42, LAYOUT, duration=90, session_timeout_s=3, zookeeper_pauses=3)
    assert a != Schedule.mixed(43, LAYOUT, duration=90, session_timeout_s=3, zookeeper_pauses=3)
    required = [f for f in a.faults if f.required]
    assert {(f.action, f.role) for f in required if f.action != "restart"} == {
        c for c in FAULT_CLASSES if c[0] != "restart"
    }
    assert sum(f.action == "restart" for f in required) == 1
    zk = [f for f in required if f.role == "zookeeper"]
    assert len(zk) >= 3 and all(f.hold > 3 for f in zk)
    assert a.span >= 90
    starts = [f.at for f in a.faults]
    assert starts == sorted(starts)
    assert all(f.at + f.hold < g.at for f, g in zip(a.faults, a.faults[1:], strict=False))
    # a layout without group coordinators leaves their classes out
    b = Schedule.mixed(1, {**LAYOUT, "group_coordinator": 0}, duration=30)
    assert all(f.role != "group_coordinator" for f in b.faults)


def test_service_events_keep_leadership_lines_and_warnings(tmp_path: Path) -> None:
    t = Timeline()
    stamp = "2030-01-01T00:00:00.000000Z"
    lines = [
        {"event": "became leader", "topic": "t", "partition": 0, "timestamp": stamp},
        {"event": "fetched", "timestamp": stamp},
        {"event": "shard 3 of __consumer_offsets moved from 0 to 1, epoch 2", "timestamp": stamp},
        {"event": "something odd", "level": "warning", "timestamp": stamp},
        {"event": "log_truncated", "offset": 7, "timestamp": "garbage"},
    ]
    (tmp_path / "storage-0.log").write_text(
        "---- start line\n" + "\n".join(json.dumps(x) for x in lines) + "\nTraceback\n"
    )
    events = service_events(tmp_path, since=t.origin - 10)
    texts = [e.text for e in events]
    assert texts == ['became leader topic="t" partition=0', "[warning] something odd"]
    assert all(e.source == "storage-0" for e in events)


def test_the_monitor_sees_a_stopped_process() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert not stopped(proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for("the process to stop", lambda: stopped(proc.pid), 5, 0.01)
        os.kill(proc.pid, signal.SIGCONT)
        wait_for("the process to run again", lambda: not stopped(proc.pid), 5, 0.01)
    finally:
        proc.kill()
        proc.wait()
    assert not stopped(proc.pid) and not stopped(None)


def test_a_run_failing_before_finish_still_leaves_its_evidence(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", gateway_port=0, zk_port=0)  # never started
    with pytest.raises(ValueError, match="boom"):
        with Checker(cluster, "t", evidence=tmp_path / "ev") as checker:
            checker.fault("kill -9 storage-0")
            raise ValueError("boom")
    assert (tmp_path / "ev" / "ABORTED.txt").read_text() == "ValueError: boom\n"
    timeline = (tmp_path / "ev" / "timeline.txt").read_text()
    assert "FAULT kill -9 storage-0" in timeline and "ABORT: ValueError: boom" in timeline
    assert (tmp_path / "ev" / "history" / "writes.jsonl").exists()
