"""ACLs in ZooKeeper as Kafka's ZooKeeper authorizer keeps them.

LITERAL patterns: ``/kafka-acl/<ResourceType>/<name>``; PREFIXED:
``/kafka-acl-extended/prefixed/<ResourceType>/<name>``; each znode holds
``{"version":1,"acls":[{"principal","permissionType","operation","host"}]}``. Every change
adds a sequential ``acl_changes_`` node under ``/kafka-acl-changes`` (data ``Topic:name``) or
``/kafka-acl-extended-changes`` (JSON naming the pattern), which authorizers watch. Updates are
compare-and-set on the znode version.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from services.common.acl import (
    Binding,
    Entry,
    PatternType,
    Resource,
    ResourceType,
    camel,
    entries_json,
    from_camel,
    parse_entries,
)
from services.common.zk.client import AsyncZk

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
_ROOTS = {PatternType.LITERAL: LITERAL_ROOT, PatternType.PREFIXED: PREFIXED_ROOT}
_RETRIES = 10


def resource_path(r: Resource) -> str:
    return f"{_ROOTS[r.pattern]}/{camel(r.type.name)}/{r.name}"


def _change(r: Resource) -> tuple[str, bytes]:
    if r.pattern == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{camel(r.type.name)}:{r.name}".encode()
    data = {"version": 1, "resourceType": camel(r.type.name), "name": r.name}
    data["patternType"] = r.pattern.name
    return EXTENDED_CHANGES, json.dumps(data, separators=(",", ":")).encode()


async def read_acls(zk: AsyncZk) -> list[Binding]:
    """Every ACL binding in ZooKeeper (resource types kafka-py does not know are skipped)."""
    out: list[Binding] = []
    for pattern, root in _ROOTS.items():
        try:
            types = await zk.get_children(root)
        except NoNodeError:
            continue
        for type_name in types:
            try:
                rtype = ResourceType(from_camel(ResourceType, type_name))
                names = await zk.get_children(f"{root}/{type_name}")
            except (ValueError, NoNodeError):
                continue
            for name in names:
                got = await zk.get_or_none(f"{root}/{type_name}/{name}")
                if got is None:
                    continue
                resource = Resource(rtype, name, pattern)
                out.extend(Binding(resource, e) for e in parse_entries(got[0]))
    return out


async def update_acls(
    zk: AsyncZk, resource: Resource, change: Callable[[list[Entry]], list[Entry]]
) -> list[Entry]:
    """Apply ``change`` to the entries of ``resource`` atomically, with a change notification;
    a resource left without entries loses its znode (as Kafka)."""
    path = resource_path(resource)
    changes_root, note = _change(resource)
    for _ in range(_RETRIES):
        got = await zk.get_or_none(path)
        old = parse_entries(got[0]) if got is not None else []
        version = got[1].version if got is not None else None
        new = change(list(old))
        if new == old:
            return new

        def build(txn: object, version: int | None = version, new: list[Entry] = new) -> None:
            if version is None:
                txn.create(path, entries_json(new))  # type: ignore[attr-defined]
            elif new:
                txn.set_data(path, entries_json(new), version)  # type: ignore[attr-defined]
            else:
                txn.delete(path, version)  # type: ignore[attr-defined]
            txn.create(f"{changes_root}/{CHANGE_PREFIX}", note, sequence=True)  # type: ignore[attr-defined]

        try:
            await zk.ensure_path(path.rsplit("/", 1)[0])
            await zk.ensure_path(changes_root)
            await zk.commit(build)
            return new
        except (BadVersionError, NodeExistsError, NoNodeError, RolledBackError):
            continue  # raced with another writer: read again
    raise RuntimeError(f"could not update {path}: too many concurrent changes")
