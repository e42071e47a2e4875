"""Read-your-writes for admin requests: wait until this gateway's cache shows a change."""

from __future__ import annotations

import asyncio

from services.common import broker_config
from services.common.logging import get_logger
from services.common.zk import layout
from services.gateway.context import GatewayServices

log = get_logger("gateway.admin")


async def wait_config_visible(s: GatewayServices, topic: str, deadline: float) -> bool:
    """Wait until the cached overrides of ``topic`` equal what ZooKeeper holds now."""
    zk = s.zk
    if zk is None:
        return True
    path = layout.topic_config_path(topic)
    try:
        await zk.sync(path)
        got = await zk.get_or_none(path)
    except Exception as exc:  # noqa: BLE001 - the change is made; only the wait is skipped
        log.warning("config_read_back_failed", topic=topic, error=repr(exc))
        return False
    expected = layout.parse_topic_config(got[0] if got else None)

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
    path = layout.broker_config_path(entity)
    try:
        await zk.sync(path)
        got = await zk.get_or_none(path)
    except Exception as exc:  # noqa: BLE001 - the change is made; only the wait is skipped
        log.warning("broker_config_read_back_failed", entity=entity, error=repr(exc))
        return False
    expected = layout.parse_topic_config(got[0] if got else None)
    remaining = deadline - asyncio.get_running_loop().time()
    ok = await s.broker_configs.wait_for(entity, expected, max(remaining, 0.0))
    if not ok:
        log.warning("broker_config_change_not_visible", entity=entity)
    return ok
