"""The controller's purge of ``/config/changes`` notifications older than Kafka's 15 minutes,
on a real ZooKeeper (the ages come from the znodes' own ctime)."""

from __future__ import annotations

import asyncio

from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.controller.config_changes import CHANGE_EXPIRATION_MS, purge_config_changes


async def _notify(zk: AsyncZk, entity: str) -> tuple[str, int]:
    path = await zk.create(
        layout.config_change_prefix(), layout.config_change_json(entity), sequence=True
    )
    stat = await zk.exists(path)
    assert stat is not None
    return path.rsplit("/", 1)[1], stat.ctime


async def test_only_notifications_older_than_15_minutes_are_deleted(zk_connect: str) -> None:
    zk = AsyncZk(zk_connect, session_timeout_ms=6000)
    await zk.start()
    try:
        await zk.ensure_layout()
        first, first_ctime = await _notify(zk, "topics/a")
        await asyncio.sleep(0.02)  # a later ctime
        second, second_ctime = await _notify(zk, "brokers/<default>")
        assert second_ctime > first_ctime
        await zk.create(f"{layout.CONFIG_CHANGES}/not_a_notification", b"")
        assert await purge_config_changes(zk, first_ctime + CHANGE_EXPIRATION_MS) == []
        assert await purge_config_changes(zk, first_ctime + CHANGE_EXPIRATION_MS + 1) == [first]
        assert await purge_config_changes(zk, second_ctime + CHANGE_EXPIRATION_MS + 1) == [second]
        assert await zk.get_children(layout.CONFIG_CHANGES) == ["not_a_notification"]
    finally:
        await zk.stop()
