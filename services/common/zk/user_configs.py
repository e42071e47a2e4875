"""Entity configs under ``/config`` as Kafka's ZooKeeper mode keeps them: ``/config/users/<user>``
(SCRAM credentials, quotas; the user's name sanitized as Kafka's ``Sanitizer`` does), ``/config/users/<user>/clients/<client>`` and
``/config/clients/<client>`` (quotas): ``{"version":1,"config":{...}}``, each change announced
by a ``/config/changes/config_change_`` sequential node with
``{"version":2,"entity_path":"users/<user>"}`` (the znode's path below ``/config``). Updates
are compare-and-set on the znode version (retried by :func:`update_entity_config`)."""

from __future__ import annotations

from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from services.common.sanitizer import desanitize, sanitize
from services.common.zk import layout
from services.common.zk.client import AsyncZk

_RETRIES = 10
CONFIG_ROOT = "/config"


def config_path(entity_path: str) -> str:
    """``users/alice/clients/c1`` -> ``/config/users/alice/clients/c1``."""
    return f"{CONFIG_ROOT}/{entity_path}"


def user_path(user: str) -> str:
    """The znode of a user (its name as Kafka sanitizes it)."""
    return f"{layout.CONFIG_USERS}/{sanitize(user)}"


async def read_entity_config(zk: AsyncZk, entity_path: str) -> tuple[dict[str, str], int | None]:
    """The entity's config and its znode version (None: no znode)."""
    got = await zk.get_or_none(config_path(entity_path))
    if got is None:
        return {}, None
    return layout.parse_topic_config(got[0]), got[1].version


async def read_user_config(zk: AsyncZk, user: str) -> tuple[dict[str, str], int | None]:
    """The user's config and its znode version (None: no znode)."""
    return await read_entity_config(zk, f"users/{sanitize(user)}")


async def list_users(zk: AsyncZk) -> list[str]:
    """The users with a znode (names desanitized)."""
    try:
        return sorted(desanitize(u) for u in await zk.get_children(layout.CONFIG_USERS))
    except NoNodeError:
        return []


async def update_entity_config(
    zk: AsyncZk, entity_path: str, change: Callable[[dict[str, str]], dict[str, str]]
) -> dict[str, str]:
    """Apply ``change`` to the entity's config atomically (with a change notification).
    Parents of a nested entity (``/config/users/<u>`` of ``users/<u>/clients/<c>``) are
    created empty when missing, as Kafka's createRecursive does."""
    path = config_path(entity_path)
    parent = path.rsplit("/", 1)[0]
    for _ in range(_RETRIES):
        config, version = await read_entity_config(zk, entity_path)
        new = change(dict(config))
        data = layout.topic_config_json(new)

        def build(txn: object, version: int | None = version, data: bytes = data) -> None:
            if version is None:
                txn.create(path, data)  # type: ignore[attr-defined]
            else:
                txn.set_data(path, data, version)  # type: ignore[attr-defined]
            txn.create(  # type: ignore[attr-defined]
                layout.config_change_prefix(),
                layout.config_change_json(entity_path),
                sequence=True,
            )

        try:
            await zk.ensure_path(parent)
            await zk.ensure_path(layout.CONFIG_CHANGES)
            await zk.commit(build)
            return new
        except (BadVersionError, NodeExistsError, NoNodeError, RolledBackError):
            continue  # raced with another writer: read again
    raise RuntimeError(f"could not update {path}: too many concurrent changes")


async def update_user_config(
    zk: AsyncZk, user: str, change: Callable[[dict[str, str]], dict[str, str]]
) -> dict[str, str]:
    """Apply ``change`` to the user's config atomically (with a change notification)."""
    return await update_entity_config(zk, f"users/{sanitize(user)}", change)
