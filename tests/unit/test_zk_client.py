import asyncio

from services.common.zk import layout
from services.common.zk.client import AsyncZk


async def test_zk_roundtrip(zk_connect):
    zk = AsyncZk(zk_connect)
    await zk.start()
    await zk.ensure_layout()
    await zk.create(layout.CONTROLLER, layout.controller_json(1), ephemeral=True)
    data, stat = await zk.get(layout.CONTROLLER)
    assert layout.loads(data)["brokerid"] == 1
    seen = []
    zk.watch_children(layout.BROKER_IDS, lambda c: seen.append(sorted(c)))
    await zk.create(layout.broker_path(3), b"{}", ephemeral=True)
    for _ in range(50):
        if seen and seen[-1] == ["3"]:
            break
        await asyncio.sleep(0.02)
    assert seen[-1] == ["3"]
    await zk.stop()
