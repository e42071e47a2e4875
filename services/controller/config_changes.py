"""Purge of Kafka's ``/config/changes/config_change_<seq>`` notifications.

The controller writes one notification per topic or broker config change (for Kafka's own tools;
kafka-py's services watch the config znodes themselves). Kafka never keeps them: every
``ZkNodeChangeNotificationListener`` deletes the ones older than 15 minutes
(``changeExpirationMs``) whenever it processes notifications. The controller does the same when
its term starts and after each notification it writes, so ``/config/changes`` stays short.
"""

from __future__ import annotations

import time

from services.common.logging import get_logger
from services.common.zk import layout
from services.common.zk.change_notifications import CHANGE_EXPIRATION_MS, purge_notifications
from services.common.zk.client import AsyncZk

log = get_logger("controller.config_changes")

_PREFIX = layout.config_change_prefix().rsplit("/", 1)[1]


async def purge_config_changes(
    zk: AsyncZk, now_ms: int, max_age_ms: int = CHANGE_EXPIRATION_MS
) -> list[str]:
    """Delete the notifications created more than ``max_age_ms`` before ``now_ms`` (ZooKeeper's
    ctime); returns their names. A notification deleted meanwhile is skipped."""
    purged = await purge_notifications(zk, layout.CONFIG_CHANGES, _PREFIX, now_ms, max_age_ms)
    if purged:
        log.info("purged config change notifications", count=len(purged), last=purged[-1])
    return purged


async def purge_expired_config_changes(zk: AsyncZk) -> None:
    """``purge_config_changes`` now, as a background task of the controller's term: a failure
    (ZooKeeper unreachable) is logged and left to the next purge."""
    try:
        await purge_config_changes(zk, time.time_ns() // 1_000_000)
    except Exception as exc:  # noqa: BLE001 - housekeeping must not end the term
        log.warning("purging config change notifications failed", error=repr(exc))
