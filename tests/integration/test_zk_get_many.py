"""AsyncZk.get_many against a real ZooKeeper: answers in the order asked, None for a missing
znode, and another error raised once every answer of its window is in (the controller's failover
reads every partition state through it), through multiRead and through the pipelined reads
kept for a ZooKeeper before 3.6."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl

from services.common.zk.client import AsyncZk

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("multi_read", [True, False], ids=["multiRead", "pipelined"])
async def test_get_many_in_order_with_missing_znodes_and_errors(
    zk_connect: str, multi_read: bool
) -> None:
    zk = AsyncZk(zk_connect, 4000)
    zk.multi_read = multi_read
    await zk.start()
    try:
        paths = [f"/get-many/n{i}" for i in range(1200)]
        for i, path in enumerate(paths[::2]):
            await zk.create(path, str(i).encode(), makepath=True)
        got = await zk.get_many(paths)
        assert [g[0] if g else None for g in got] == [
            str(i // 2).encode() if i % 2 == 0 else None for i in range(len(paths))
        ]
        assert all(g[1].version == 0 for g in got if g)
        assert await zk.get_many([]) == []
        # a znode nobody may read: the error reaches the caller, after the other answers
        no_read = [make_acl("world", "anyone", delete=True)]
        zk.client.create("/get-many/closed", b"x", acl=no_read)  # kazoo's blocking call
        with pytest.raises(NoAuthError):
            await zk.get_many([paths[0], "/get-many/closed", paths[1]])
        assert (await zk.get_many(paths[:1]))[0] is not None  # the session still serves
        assert zk.multi_read is multi_read  # ZooKeeper 3.8 here: multiRead was not refused
    finally:
        await zk.stop()
