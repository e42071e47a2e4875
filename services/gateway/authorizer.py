"""The gateway's authorizer: Kafka's AclAuthorizer decisions over a cache of ZooKeeper's ACLs.

On when ``authorizer.class.name`` is set. The cache is the whole ACL set, read at start and
re-read whenever a change notification appears under ``/kafka-acl-changes`` or
``/kafka-acl-extended-changes`` (so every gateway sees every change within a ZooKeeper round
trip). Decisions as AclAuthorizer: super users pass; ACLs of the resource are the LITERAL ones
of its name and of ``*`` plus the PREFIXED ones its name starts with; a resource without any
ACL is allowed only with ``allow.everyone.if.no.acl.found``; a matching DENY (principal or
``User:*``, host or ``*``, operation or ALL) wins over any ALLOW; ALLOW of READ/WRITE/DELETE/
ALTER implies DESCRIBE, ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS. Notifications older
than 15 minutes are deleted after each reload, as Kafka's brokers do.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from services.common.acl import (
    IMPLIED_BY,
    WILDCARD,
    Binding,
    Entry,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from services.common.logging import get_logger
from services.common.zk.acls import CHANGE_PREFIX, EXTENDED_CHANGES, LITERAL_CHANGES, read_acls
from services.common.zk.change_notifications import purge_notifications
from services.common.zk.client import AsyncZk
from services.common.zk.watches import WatchSet
from services.gateway import metrics

log = get_logger("gateway.authorizer")

WILDCARD_PRINCIPAL = "User:*"
# Kafka's authorizer class names (and kafka-py's own); any of them turns authorization on
AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafkapy.AclAuthorizer",
)


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (e.g. ``User:admin;User:ops``)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


def peer_host(peer: str) -> str:
    """The client address of ``host:port`` (IPv6 hosts keep their colons)."""
    return peer.rsplit(":", 1)[0] if ":" in peer else peer


class Authorizer:
    def __init__(self, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._literal: dict[tuple[ResourceType, str], list[Entry]] = {}
        self._prefixed: dict[ResourceType, list[tuple[str, Entry]]] = {}
        self._bindings: list[Binding] = []

    @property
    def bindings(self) -> list[Binding]:
        return self._bindings

    def load(self, bindings: list[Binding]) -> None:
        literal: dict[tuple[ResourceType, str], list[Entry]] = defaultdict(list)
        prefixed: dict[ResourceType, list[tuple[str, Entry]]] = defaultdict(list)
        for b in bindings:
            r = b.resource
            if r.pattern == PatternType.LITERAL:
                literal[(r.type, r.name)].append(b.entry)
            else:
                prefixed[r.type].append((r.name, b.entry))
        self._literal, self._prefixed, self._bindings = dict(literal), dict(prefixed), bindings
        metrics.ACLS_TOTAL.set(len(bindings))

    def _acls(self, rtype: ResourceType, name: str) -> list[Entry]:
        out = list(self._literal.get((rtype, name), ()))
        if name != WILDCARD:
            out.extend(self._literal.get((rtype, WILDCARD), ()))
        out.extend(e for prefix, e in self._prefixed.get(rtype, ()) if name.startswith(prefix))
        return out

    def authorize(
        self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        acls = self._acls(rtype, name)
        if not acls:
            return self.allow_if_no_acl
        mine = [
            e
            for e in acls
            if e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD)
        ]
        if any(
            e.permission == Permission.DENY and e.operation in (op, Operation.ALL) for e in mine
        ):
            return False
        allowed_ops = (*IMPLIED_BY.get(op, (op,)), Operation.ALL)
        return any(e.permission == Permission.ALLOW and e.operation in allowed_ops for e in mine)

    def authorize_any(self, principal: str, host: str, op: Operation, rtype: ResourceType) -> bool:
        """Whether ``op`` is allowed on some resource of ``rtype`` (Kafka's
        authorizeByResourceType, used for idempotent producers since KIP-679)."""
        if principal in self.super_users:
            return True
        names = {n for (t, n) in self._literal if t == rtype}
        names |= {p for p, _ in self._prefixed.get(rtype, ())}
        if not names:
            return self.allow_if_no_acl
        return any(self.authorize(principal, host, op, rtype, n) for n in names)


class AclSync:
    """Keeps an :class:`Authorizer` equal to ZooKeeper's ACLs (load at start, reload on every
    change notification; reloads are coalesced)."""

    def __init__(self, zk: AsyncZk, authorizer: Authorizer) -> None:
        self._zk = zk
        self.authorizer = authorizer
        self._watches = WatchSet(zk, threads=2)
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            await self._zk.ensure_path(root)
        await self.reload()
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self._watches.children(root, lambda _children: self._dirty.set())
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        self._watches.stop_all()
        if self._task is not None:
            self._task.cancel()

    async def reload(self) -> None:
        self.authorizer.load(await read_acls(self._zk))

    async def purge(self) -> None:
        """Delete notifications older than 15 minutes, as every Kafka broker does."""
        now_ms = time.time_ns() // 1_000_000
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            await purge_notifications(self._zk, root, CHANGE_PREFIX, now_ms)

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.reload()
                log.info("acls_reloaded", bindings=len(self.authorizer.bindings))
                await self.purge()
            except Exception as exc:  # noqa: BLE001 - keep the old cache, retry shortly
                log.warning("acl_reload_failed", error=repr(exc))
                await asyncio.sleep(1.0)
                self._dirty.set()
