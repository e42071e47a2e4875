"""Purge of Kafka's sequential change notifications (``/config/changes/config_change_*``,
``/kafka-acl-changes/acl_changes_*``, ...). Kafka never keeps them: every
``ZkNodeChangeNotificationListener`` deletes the ones older than 15 minutes
(``changeExpirationMs``) whenever it processes notifications."""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from services.common.zk.client import AsyncZk

#: Kafka's ZkNodeChangeNotificationListener.changeExpirationMs
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


async def purge_notifications(
    zk: AsyncZk, root: str, prefix: str, now_ms: int, max_age_ms: int = CHANGE_EXPIRATION_MS
) -> list[str]:
    """Delete the ``prefix*`` children of ``root`` created more than ``max_age_ms`` before
    ``now_ms`` (ZooKeeper's ctime); returns their names. One deleted meanwhile is skipped."""
    try:
        names = await zk.get_children(root)
    except NoNodeError:
        return []
    purged: list[str] = []
    for name in sorted(names):
        if not name.startswith(prefix):
            continue
        path = f"{root}/{name}"
        stat = await zk.exists(path)
        if stat is None:
            continue
        if now_ms - stat.ctime <= max_age_ms:
            break  # sequential: every later notification is younger
        try:
            await zk.delete(path)
        except NoNodeError:
            continue
        purged.append(name)
    return purged
