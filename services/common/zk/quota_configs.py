"""Reading the client quota entities of ZooKeeper (``/config/users``, their ``clients``
children, ``/config/clients``); writes go through ``user_configs.update_entity_config``."""

from __future__ import annotations

import asyncio

from kazoo.exceptions import NoNodeError

from services.common.client_quotas import Entity, entity_path, quota_values
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.user_configs import config_path, read_entity_config


async def _children(zk: AsyncZk, path: str) -> list[str]:
    try:
        return await zk.get_children(path)
    except NoNodeError:
        return []


async def read_quota_entity(zk: AsyncZk, entity: Entity) -> dict[str, float]:
    """The quota values of one entity (empty: none, or no znode)."""
    config, _ = await read_entity_config(zk, entity_path(entity))
    return quota_values(config)


async def list_quota_entities(zk: AsyncZk) -> list[Entity]:
    """Every entity that has a znode (whether it holds quotas or not)."""
    users, clients = await asyncio.gather(
        _children(zk, layout.CONFIG_USERS), _children(zk, layout.CONFIG_CLIENTS)
    )
    nested = await asyncio.gather(
        *(_children(zk, config_path(f"users/{u}/clients")) for u in users)
    )
    out: list[Entity] = [(u, None) for u in users]
    out += [(u, c) for u, cs in zip(users, nested, strict=True) for c in cs]
    out += [(None, c) for c in clients]
    return out


async def read_quota_entities(zk: AsyncZk) -> dict[Entity, dict[str, float]]:
    """Every entity with at least one quota, and its values."""
    entities = await list_quota_entities(zk)
    values = await asyncio.gather(*(read_quota_entity(zk, e) for e in entities))
    return {e: v for e, v in zip(entities, values, strict=True) if v}
