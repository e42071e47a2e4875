"""ZooKeeper access of the controller: epoch-guarded multi-ops and loading the cluster state.

Every controller write goes through :class:`EpochGuard`: a ZooKeeper multi whose first operation
checks the version of ``/controller_epoch``. After another controller bumped the epoch, the check
fails and the write raises :class:`ControllerMovedError` (Kafka's ControllerMovedException).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError, RuntimeInconsistency

from services.common.zk import layout
from services.common.zk.client import AsyncZk, ZnodeStat
from services.common.zk.layout import BrokerRegistration
from services.controller.model import LiveBroker, PartitionState, TopicState

MAX_OPS_PER_MULTI = 1000
STATE_READ_WINDOW = 500


class ControllerMovedError(Exception):
    """The controller epoch moved on: this controller was deposed and must resign."""


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    sequence: bool = False
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


Op = Create | SetData | Delete


class ZkOpError(Exception):
    """One operation of a multi failed (the whole multi was rolled back)."""

    def __init__(self, op: Op, cause: BaseException) -> None:
        super().__init__(f"{type(op).__name__} {op.path}: {type(cause).__name__}")
        self.op = op
        self.cause = cause


async def multi(
    zk: AsyncZk, ops: Sequence[Op], *, check: tuple[str, int] | None = None
) -> list[Any]:
    """Run ``ops`` atomically, optionally after a version check; returns the ops' results.

    Raises ``ZkOpError`` naming the failing operation (a failed check is reported as a
    ``SetData`` on the checked path).
    """
    txn = zk.client.transaction()
    if check is not None:
        txn.check(*check)
    for op in ops:
        if isinstance(op, Create):
            txn.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
        elif isinstance(op, SetData):
            txn.set_data(op.path, op.data, op.version)
        else:
            txn.delete(op.path, op.version)
    results: list[Any] = await asyncio.to_thread(txn.commit)
    offset = 1 if check is not None else 0
    for i, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(
            result, RolledBackError | RuntimeInconsistency
        ):
            if i < offset and check is not None:
                raise ZkOpError(SetData(check[0], b"", check[1]), result)
            raise ZkOpError(ops[i - offset], result)
    return results[offset:]


class EpochGuard:
    """Writes that only succeed while ``/controller_epoch`` still has our version."""

    def __init__(self, zk: AsyncZk, epoch: int, epoch_zk_version: int) -> None:
        self.zk = zk
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version

    async def commit(self, ops: Sequence[Op]) -> list[Any]:
        """Commit ``ops`` in multis of at most MAX_OPS_PER_MULTI operations, each guarded."""
        results: list[Any] = []
        for start in range(0, max(len(ops), 1), MAX_OPS_PER_MULTI):
            chunk = ops[start : start + MAX_OPS_PER_MULTI]
            if not chunk:
                break
            try:
                results += await multi(
                    self.zk, chunk, check=(layout.CONTROLLER_EPOCH, self.epoch_zk_version)
                )
            except ZkOpError as exc:
                if exc.op.path == layout.CONTROLLER_EPOCH and isinstance(
                    exc.cause, BadVersionError | NoNodeError
                ):
                    raise ControllerMovedError(
                        f"controller epoch {self.epoch} (zk version {self.epoch_zk_version}) "
                        "is no longer current"
                    ) from None
                raise
        return results


# ---- loading ----------------------------------------------------------------------------


async def read_broker(zk: AsyncZk, broker_id: int) -> LiveBroker | None:
    got = await zk.get_or_none(layout.broker_path(broker_id))
    if got is None:
        return None
    data, stat = got
    return LiveBroker(BrokerRegistration.from_json(broker_id, data), stat.czxid)


async def read_brokers(zk: AsyncZk) -> dict[int, LiveBroker]:
    ids = sorted(int(c) for c in await zk.get_children(layout.BROKER_IDS) if c.isdigit())
    found = await zk.get_many([layout.broker_path(i) for i in ids])
    return {
        i: LiveBroker(BrokerRegistration.from_json(i, got[0]), got[1].czxid)
        for i, got in zip(ids, found, strict=True)
        if got is not None
    }


async def read_partition_state(zk: AsyncZk, topic: str, partition: int) -> PartitionState | None:
    got = await zk.get_or_none(layout.partition_state_path(topic, partition))
    return None if got is None else _partition_state(*got)


def _partition_state(data: bytes, stat: ZnodeStat) -> PartitionState:
    st = layout.PartitionStateZk.from_json(data)
    return PartitionState(
        st.leader, st.leader_epoch, list(st.isr), st.controller_epoch, stat.version
    )


async def read_topic_config(zk: AsyncZk, topic: str) -> dict[str, str]:
    got = await zk.get_or_none(layout.topic_config_path(topic))
    return layout.parse_topic_config(got[0]) if got else {}


async def read_assignment(
    zk: AsyncZk, topic: str
) -> tuple[dict[int, list[int]], str | None, int] | None:
    """(assignment, topic id, znode version) of ``/brokers/topics/<t>``, or None."""
    got = await zk.get_or_none(layout.topic_path(topic))
    if got is None:
        return None
    assignment, topic_id = layout.parse_topic_assignment(got[0])
    return assignment, topic_id, got[1].version


async def read_topic(zk: AsyncZk, name: str) -> tuple[TopicState, bool] | None:
    """The topic with its config and partition states; the flag says the topic id is new (the
    znode had none, so the caller must write it back)."""
    raw = await zk.get_or_none(layout.topic_path(name))
    if raw is None:
        return None
    topic, fresh_id = _topic(name, raw[0], await read_topic_config(zk, name))
    if parts := [(name, p) for p in topic.assignment]:
        topic.states = {p: st for (_t, p), st in (await read_partition_states(zk, parts)).items()}
    return topic, fresh_id


async def read_topics(zk: AsyncZk, names: Sequence[str]) -> list[tuple[TopicState, bool]]:
    """Each of ``names`` that exists, with its config but no partition states (a failover's
    first step): two multiReads per window of topics, as :func:`read_topic` without states."""
    raws = await zk.get_many([layout.topic_path(n) for n in names])
    configs = await zk.get_many([layout.topic_config_path(n) for n in names])
    return [
        _topic(name, raw[0], layout.parse_topic_config(config[0]) if config else {})
        for name, raw, config in zip(names, raws, configs, strict=True)
        if raw is not None
    ]


def _topic(name: str, raw: bytes, config: dict[str, str]) -> tuple[TopicState, bool]:
    assignment, topic_id = layout.parse_topic_assignment(raw)
    adding, removing = layout.parse_topic_reassignment(raw)
    tid = topic_id or layout.topic_id_to_str(layout.new_topic_id())
    return TopicState(name, tid, assignment, config, {}, adding, removing), topic_id is None


async def read_partition_states(
    zk: AsyncZk,
    parts: Sequence[tuple[str, int]],
    between: Callable[[], Awaitable[None]] | None = None,
) -> dict[tuple[str, int], PartitionState]:
    """The state znodes of ``parts`` that exist, read STATE_READ_WINDOW at a time: pipelined,
    yet never so many at once that the session's other requests (ZooKeeper answers a session
    in order) wait behind all of them. ``between`` is awaited before each further window."""
    out: dict[tuple[str, int], PartitionState] = {}
    for start in range(0, len(parts), STATE_READ_WINDOW):
        if start and between is not None:
            await between()
        chunk = parts[start : start + STATE_READ_WINDOW]
        got = await zk.get_many([layout.partition_state_path(t, p) for t, p in chunk])
        for tp, answer in zip(chunk, got, strict=True):
            if answer is not None:
                out[tp] = _partition_state(*answer)
    return out


async def subtree(zk: AsyncZk, path: str) -> list[str]:
    """``path`` and every znode below it, deepest first (for a recursive multi delete)."""
    try:
        children = await zk.get_children(path)
    except NoNodeError:
        return []
    out: list[str] = []
    for child in children:
        out += await subtree(zk, f"{path}/{child}")
    out.append(path)
    return out
