"""Controller election in ZooKeeper, exactly as Kafka's KafkaZkClient does it.

The winner creates the ephemeral ``/controller`` and bumps ``/controller_epoch`` in one multi,
conditional on the epoch znode's version; the new epoch's znode version guards every later write.
"""

from __future__ import annotations

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.controller.zkstore import Create, SetData, ZkOpError, multi

INITIAL_EPOCH = 0


class Elector:
    def __init__(self, zk: AsyncZk, controller_id: int) -> None:
        self.zk = zk
        self.controller_id = controller_id

    async def _read_epoch(self) -> tuple[int, int]:
        got = await self.zk.get_or_none(layout.CONTROLLER_EPOCH)
        if got is None:
            try:
                await self.zk.create(layout.CONTROLLER_EPOCH, str(INITIAL_EPOCH).encode())
            except NodeExistsError:
                pass
            got = await self.zk.get(layout.CONTROLLER_EPOCH)
        data, stat = got
        return int(data.decode().strip() or INITIAL_EPOCH), stat.version

    async def try_elect(self) -> tuple[int, int] | None:
        """(epoch, epoch znode version) if this controller won, None if another one holds
        ``/controller`` or won the race."""
        epoch, version = await self._read_epoch()
        new_epoch = epoch + 1
        try:
            results = await multi(
                self.zk,
                [
                    Create(
                        layout.CONTROLLER,
                        layout.controller_json(self.controller_id),
                        ephemeral=True,
                    ),
                    SetData(layout.CONTROLLER_EPOCH, str(new_epoch).encode(), version),
                ],
            )
        except ZkOpError as exc:
            if isinstance(exc.cause, NodeExistsError | BadVersionError):
                return None
            raise
        return new_epoch, results[1].version

    async def holder(self) -> tuple[int, int] | None:
        """(brokerid, ephemeral owner session) of ``/controller``, or None."""
        got = await self.zk.get_or_none(layout.CONTROLLER)
        if got is None:
            return None
        data, stat = got
        body = layout.loads(data) or {}
        return int(body.get("brokerid", -1)), stat.ephemeralOwner

    async def delete_if_ours(self) -> bool:
        """Delete ``/controller`` if this session holds it (resignation)."""
        got = await self.zk.get_or_none(layout.CONTROLLER)
        if got is None or got[1].ephemeralOwner != self.zk.session_id:
            return False
        try:
            await self.zk.delete(layout.CONTROLLER, version=got[1].version)
        except (NoNodeError, BadVersionError):
            return False
        return True
