"""Reproduction of issue 19's unanswered first commits: a fresh cluster (the groups bench's
shape) and ONE admin client sending every group's first OffsetCommit at once, before
``__consumer_offsets`` exists. Prints when the commits were answered; exits 1 when any failed
(issue 19: librdkafka's "Failed while waiting for response from broker: Local: Timed out" for
groups whose three FindCoordinator attempts all came back COORDINATOR_NOT_AVAILABLE: librdkafka
then never sent their OffsetCommit). A failed loop's cluster logs are kept.

    flock /tmp/kafkapy-heavy.lock python -m bench.scale.first_commits [groups] [loops]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.scale.groups import send_commits
from services.cli.local_cluster import LocalCluster

# FIRST_COMMITS_DEBUG=1: librdkafka's protocol and admin debug lines on stderr (which requests
# were sent and answered, per correlation id)
DEBUG = {"debug": "protocol,admin"} if os.environ.get("FIRST_COMMITS_DEBUG") else {}


def first_round(bootstrap: str, groups: int, partitions: int = 100) -> list[str]:
    """Every group's first commit over one admin connection; the failures."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **DEBUG})
    topic = f"first-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=60)[topic].result(90)
    started = time.perf_counter()
    names = [f"first-{i}" for i in range(groups)]
    futures = [fut for fut, _ in send_commits([admin], names, topic, partitions, 0)]
    failures = []
    done_at: list[float] = []
    for fut in futures:
        fut.add_done_callback(lambda _f: done_at.append(time.perf_counter() - started))
    for i, fut in enumerate(futures):
        try:
            res = fut.result(timeout=120)
            bad = [tp.error for tp in res.topic_partitions if tp.error is not None]
            if bad:
                failures.append(f"group {i}: {bad[0]}")
        except Exception as exc:  # noqa: BLE001 - reported
            failures.append(f"group {i} at {time.perf_counter() - started:.1f}s: {exc}")
    done_at.sort()
    marks = [done_at[int(q * (len(done_at) - 1))] for q in (0.0, 0.25, 0.5, 0.75, 1.0)]
    print("answered at (s, min/p25/p50/p75/max):", " / ".join(f"{m:.1f}" for m in marks))
    print(f"{groups} first commits in {time.perf_counter() - started:.1f}s, {len(failures)} failed")
    return failures


def main() -> int:
    groups = int(sys.argv[1]) if len(sys.argv) > 1 else 248
    loops = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    failed = 0
    for n in range(loops):
        data = Path(tempfile.mkdtemp(prefix="kafka-py-first-commits-"))
        c = LocalCluster(
            data, gateway_port=0, zk_port=0, storage_nodes=3, controllers=1, group_coordinators=2
        )
        try:
            c.start(timeout=180)
            failures = first_round(c.bootstrap, groups)
        finally:
            c.stop()
            if failures:
                kept = Path(tempfile.gettempdir()) / f"first-commits-logs-{uuid.uuid4().hex[:6]}"
                shutil.copytree(data / "logs", kept)
                print(f"loop {n}: {failures[:3]} ... logs kept in {kept}")
            shutil.rmtree(data, ignore_errors=True)
        failed += bool(failures)
    print(f"{failed} of {loops} loops failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
