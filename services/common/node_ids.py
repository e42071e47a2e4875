"""Generated node ids for services run as Deployment replicas (no ordinal to take an id from).

``node.id`` / ``controller.id`` = -1 asks for one the way Kafka generates broker ids
(``broker.id.generation.enable``): bump the version of ``/brokers/seqid`` and add
``reserved.broker.max.id`` (1000), so generated ids start at 1001 and never meet the storage
nodes' StatefulSet ordinals. Every start gets a new id; the old one's ephemeral registration
goes with its session.
"""

from __future__ import annotations

from typing import TypeVar

import structlog

from services.common.logging import get_logger
from services.common.settings import ServiceSettings
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.security import NO_SECURITY, ZkSecurity, zk_security

log = get_logger(__name__)

RESERVED_BROKER_MAX_ID = 1000  # Kafka's reserved.broker.max.id default
GENERATE = -1

M = TypeVar("M", bound=ServiceSettings)


async def generate_node_id(
    connect: str,
    session_timeout_ms: int,
    timeout_s: float = 15.0,
    security: ZkSecurity = NO_SECURITY,
) -> int:
    """A cluster-unique id above ``RESERVED_BROKER_MAX_ID`` from ZooKeeper's ``/brokers/seqid``."""
    zk = AsyncZk(connect, session_timeout_ms, security)
    await zk.start(timeout_s)
    try:
        await zk.ensure_path(layout.BROKER_SEQID)
        stat = await zk.set(layout.BROKER_SEQID, b"")
        return int(stat.version) + RESERVED_BROKER_MAX_ID
    finally:
        await zk.stop()


async def with_generated_id(settings: M, field: str) -> M:
    """``settings`` with ``field`` generated when it is -1 (logged and bound to the log context)."""
    if getattr(settings, field) != GENERATE:
        return settings
    new_id = await generate_node_id(
        settings.zookeeper_connect,
        settings.zookeeper_session_timeout_ms,
        security=zk_security(settings),
    )
    structlog.contextvars.bind_contextvars(node_id=new_id)
    log.info("node_id_generated", node_id=new_id, znode=layout.BROKER_SEQID)
    return settings.model_copy(update={field: new_id})
