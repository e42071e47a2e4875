"""Keeps a gateway's :class:`QuotaConfigs` equal to ZooKeeper's quota entities.

At start every entity is read; then, as a Kafka broker's ZkNodeChangeNotificationListener,
each new ``/config/changes/config_change_<seq>`` notification (sequence above the last one
processed) whose ``entity_path`` names a quota entity (``users/..``, ``clients/..``) makes
that entity be read again. Notifications of other entities (brokers, topics) are skipped;
the controller purges old ones (D39). A failed pass is retried after a second.
"""

from __future__ import annotations

import asyncio

from kazoo.exceptions import NoNodeError

from services.common.client_quotas import QuotaConfigs, parse_entity_path
from services.common.logging import get_logger
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.quota_configs import read_quota_entities, read_quota_entity
from services.common.zk.watches import WatchSet

log = get_logger("gateway.quotas")

_PREFIX = layout.config_change_prefix().rsplit("/", 1)[1]  # "config_change_"


def _sequence(name: str) -> int:
    try:
        return int(name[len(_PREFIX) :]) if name.startswith(_PREFIX) else -1
    except ValueError:
        return -1


class QuotaSync:
    def __init__(self, zk: AsyncZk, configs: QuotaConfigs) -> None:
        self._zk = zk
        self.configs = configs
        self._watches = WatchSet(zk, threads=1)
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last = -1

    async def start(self) -> None:
        await self._zk.ensure_path(layout.CONFIG_CHANGES)
        # the sequence first: a change made during the full read is then read again
        names = await self._zk.get_children(layout.CONFIG_CHANGES)
        self._last = max((_sequence(n) for n in names), default=-1)
        self.configs.replace(await read_quota_entities(self._zk))
        log.info("client_quotas_loaded", entities=len(self.configs.entities))
        self._watches.children(layout.CONFIG_CHANGES, lambda _children: self._dirty.set())
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        self._watches.stop_all()
        if self._task is not None:
            self._task.cancel()

    async def process(self) -> int:
        """Apply the notifications not seen yet; how many quota entities were re-read."""
        names = await self._zk.get_children(layout.CONFIG_CHANGES)
        fresh = sorted((s, n) for n in names if (s := _sequence(n)) > self._last)
        reread = 0
        for seq, name in fresh:
            got = await self._zk.get_or_none(f"{layout.CONFIG_CHANGES}/{name}")
            self._last = seq
            if got is None:
                continue
            try:
                path = str((layout.loads(got[0]) or {}).get("entity_path", ""))
            except ValueError:
                continue
            entity = parse_entity_path(path)
            if entity is None:
                continue
            try:
                values = await read_quota_entity(self._zk, entity)
            except NoNodeError:
                values = {}
            self.configs.set(entity, values)
            reread += 1
            log.info("client_quota_changed", entity_path=path, quotas=values)
        return reread

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.process()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the old values, retry shortly
                log.warning("client_quota_reload_failed", error=repr(exc))
                await asyncio.sleep(1.0)
                self._dirty.set()
