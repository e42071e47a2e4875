"""Read-your-writes for admin requests: wait until this gateway's cache shows a change."""

from __future__ import annotations

import asyncio

from services.common import broker_config
from services.common.logging import get_logger
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.gateway.context import GatewayServices

log = get_logger("gateway.admin")


async def wait_config_visible(s: GatewayServices, topic: str, deadline: float) -> bool:
    """Wait until the cached overrides of ``topic`` equal what ZooKeeper holds now."""
    zk = s.zk
    if zk is None:
        return True
    expected = await _read_back(zk, layout.topic_config_path(topic), topic)
    if expected is None:
        return False

    def visible() -> bool:
        t = s.cache.topic(topic)
        return t is None or dict(t.config) == expected

    remaining = deadline - asyncio.get_running_loop().time()
    ok = await s.cache.wait_for(visible, max(remaining, 0.0))
    if not ok:
        log.warning("config_change_not_visible", topic=topic)
    return ok


async def wait_broker_config_visible(
    s: GatewayServices, resource_name: str, deadline: float
) -> bool:
    """Wait until this gateway's dynamic broker configs of ``resource_name`` ("" = the
    cluster default) equal what ZooKeeper holds now."""
    zk = s.zk
    if zk is None:
        return True
    entity = broker_config.entity_name(resource_name)
    expected = await _read_back(zk, layout.broker_config_path(entity), entity)
    if expected is None:
        return False
    remaining = deadline - asyncio.get_running_loop().time()
    ok = await s.broker_configs.wait_for(entity, expected, max(remaining, 0.0))
    if ok and s.broker_config is not None:  # and applied by this gateway (its limits)
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(s.broker_config.settled(), max(remaining, 0.0))
        except TimeoutError:
            ok = False
    if not ok:
        log.warning("broker_config_change_not_visible", entity=entity)
    return ok


async def _read_back(zk: AsyncZk, path: str, what: str) -> dict[str, str] | None:
    """The config overrides ZooKeeper holds now at ``path`` (after a sync), or None when they
    cannot be read (the change is made; only the wait for it is skipped)."""
    try:
        await zk.sync(path)
        got = await zk.get_or_none(path)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("config_read_back_failed", config=what, path=path, error=repr(exc))
        return None
    return layout.parse_topic_config(got[0] if got else None)
