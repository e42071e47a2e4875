"""ACLs in a real ZooKeeper: compare-and-set updates with Kafka's change notifications, the
full read back, znodes removed with their last entry, and the purge of old notifications."""

from __future__ import annotations

import asyncio

from services.common.acl import Binding, Entry, Operation, PatternType, Permission, Resource
from services.common.acl import ResourceType as RT
from services.common.zk.acls import (
    CHANGE_PREFIX,
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    read_acls,
    resource_path,
    update_acls,
)
from services.common.zk.change_notifications import CHANGE_EXPIRATION_MS, purge_notifications
from services.common.zk.client import AsyncZk

READ = Entry("User:a", "*", Operation.READ, Permission.ALLOW)
DENY = Entry("User:b", "10.0.0.1", Operation.WRITE, Permission.DENY)


async def test_updates_notifications_and_purge(zk_connect: str) -> None:
    zk = AsyncZk(zk_connect, session_timeout_ms=6000)
    await zk.start()
    try:
        topic = Resource(RT.TOPIC, "t", PatternType.LITERAL)
        prefix = Resource(RT.GROUP, "g-", PatternType.PREFIXED)
        assert await update_acls(zk, topic, lambda old: [*old, READ]) == [READ]
        await asyncio.sleep(0.02)  # a later ctime for the next notification
        assert await update_acls(zk, topic, lambda old: [*old, DENY]) == [READ, DENY]
        await update_acls(zk, prefix, lambda old: [*old, READ])
        got = set(await read_acls(zk))
        assert got == {Binding(topic, READ), Binding(topic, DENY), Binding(prefix, READ)}
        literal = sorted(await zk.get_children(LITERAL_CHANGES))
        extended = sorted(await zk.get_children(EXTENDED_CHANGES))
        assert len(literal) == 2 and len(extended) == 1
        data, _ = await zk.get(f"{LITERAL_CHANGES}/{literal[0]}")
        assert data == b"Topic:t"
        # the last entry removed: the znode goes, as in Kafka
        await update_acls(zk, prefix, lambda old: [])
        assert await zk.exists(resource_path(prefix)) is None
        # notifications older than 15 minutes are purged, younger ones kept
        stat = await zk.exists(f"{LITERAL_CHANGES}/{literal[1]}")
        assert stat is not None
        purged = await purge_notifications(
            zk, LITERAL_CHANGES, CHANGE_PREFIX, stat.ctime + CHANGE_EXPIRATION_MS
        )
        assert purged == [literal[0]]
        assert await zk.get_children(LITERAL_CHANGES) == [literal[1]]
    finally:
        await zk.stop()
