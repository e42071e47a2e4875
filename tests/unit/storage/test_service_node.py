"""Start-up checks of the storage node that need no ZooKeeper: meta.properties, log dir lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.storage.log.meta_properties import (
    MetaProperties,
    read_meta_properties,
    write_meta_properties,
)
from services.storage.node import LogDirLock, check_meta_properties
from services.storage.registration import StartupError, new_cluster_id


def test_meta_properties_written_when_missing(tmp_path: Path) -> None:
    check_meta_properties(tmp_path, 3, "abcdefghijklmnopqrstuv")
    meta = read_meta_properties(tmp_path)
    assert meta is not None and (meta.broker_id, meta.cluster_id) == (3, "abcdefghijklmnopqrstuv")
    check_meta_properties(tmp_path, 3, "abcdefghijklmnopqrstuv")  # matching: accepted


def test_meta_properties_mismatches_refuse_to_start(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, MetaProperties(broker_id=3, cluster_id="one"))
    with pytest.raises(StartupError, match="doesn't match the stored cluster.id one"):
        check_meta_properties(tmp_path, 3, "two")
    with pytest.raises(
        StartupError, match="configured broker.id 4 doesn't match stored broker.id 3"
    ):
        check_meta_properties(tmp_path, 4, "one")


def test_meta_properties_without_cluster_id_gets_it(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, MetaProperties(broker_id=3))
    check_meta_properties(tmp_path, 3, "cid")
    meta = read_meta_properties(tmp_path)
    assert meta is not None and meta.cluster_id == "cid"


def test_log_dir_lock_is_exclusive(tmp_path: Path) -> None:
    first, second = LogDirLock(tmp_path), LogDirLock(tmp_path)
    first.acquire()
    with pytest.raises(StartupError, match="another process"):
        second.acquire()
    first.release()
    second.acquire()
    second.release()


def test_cluster_id_format() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") and "=" not in i for i in ids)


async def test_a_periodic_job_meeting_zookeeper_away_warns_and_runs_again() -> None:
    """A storage node's periodic jobs (usage report, ISR expiry...) outlive a ZooKeeper pause:
    the run that meets it logs one warning line (no traceback), the next run happens; any
    other failure is still logged with its traceback."""
    import asyncio
    from types import SimpleNamespace

    from kazoo.exceptions import ConnectionLoss, SessionExpiredError
    from structlog.testing import capture_logs

    from services.storage.node import StorageNode

    failures: list[BaseException] = [SessionExpiredError(), ConnectionLoss(), ValueError("bug")]
    runs = 0
    fake = SimpleNamespace(_stop_tasks=asyncio.Event())

    async def job() -> None:
        nonlocal runs
        runs += 1
        if failures:
            raise failures.pop(0)
        fake._stop_tasks.set()

    with capture_logs() as logs:
        await asyncio.wait_for(StorageNode._periodic(fake, "usage-report", 1, 0, job), 10)  # type: ignore[arg-type]
    assert runs == 4
    skipped = [e for e in logs if e["event"] == "background task skipped: ZooKeeper unavailable"]
    assert [e["task"] for e in skipped] == ["usage-report"] * 2
    assert all(e["log_level"] == "warning" and "exc_info" not in e for e in skipped)
    failed = [e for e in logs if e["event"] == "background task failed"]
    assert len(failed) == 1 and failed[0].get("exc_info")
