"""Kafka's ACL model: resource types, pattern types, operations and permissions with their wire
codes and the names Kafka's ZooKeeper authorizer writes, ACL bindings and binding filters
(DescribeAcls/DeleteAcls semantics, MATCH/ANY included)."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource
WILDCARD = "*"  # resource name, principal ("User:*") and host wildcard


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def camel(name: str) -> str:
    """Kafka's names in ZooKeeper and tools: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in name.split("_"))


def from_camel(enum_cls: type[enum.IntEnum], text: str) -> int:
    """Parse a Kafka name in any case and with or without underscores (ValueError if unknown)."""
    key = text.replace("_", "").replace("-", "").lower()
    for member in enum_cls:
        if member.name.replace("_", "").lower() == key:
            return int(member)
    raise ValueError(f"unknown {enum_cls.__name__} {text!r}")


# Operations whose ALLOW also allows these (Kafka's AclAuthorizer: DESCRIBE is implied by READ,
# WRITE, DELETE, ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS). DENY is never widened.
IMPLIED_BY: dict[Operation, tuple[Operation, ...]] = {
    Operation.DESCRIBE: (
        Operation.DESCRIBE,
        Operation.READ,
        Operation.WRITE,
        Operation.DELETE,
        Operation.ALTER,
    ),
    Operation.DESCRIBE_CONFIGS: (Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
}


@dataclass(frozen=True, slots=True)
class Resource:
    type: ResourceType
    name: str
    pattern: PatternType


@dataclass(frozen=True, slots=True)
class Entry:
    principal: str
    host: str
    operation: Operation
    permission: Permission


@dataclass(frozen=True, slots=True)
class Binding:
    resource: Resource
    entry: Entry


@dataclass(frozen=True, slots=True)
class BindingFilter:
    """DescribeAcls/DeleteAcls filter; None fields match anything."""

    resource_type: int
    name: str | None
    pattern: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def invalid(self) -> str | None:
        """Why Kafka rejects this filter (INVALID_REQUEST), or None."""
        for value, enum_cls in (
            (self.resource_type, ResourceType),
            (self.pattern, PatternType),
            (self.operation, Operation),
            (self.permission, Permission),
        ):
            if value not in enum_cls._value2member_map_ or value == 0:
                return f"Invalid {enum_cls.__name__} {value} in filter"
        return None

    def matches_resource(self, r: Resource) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != r.type:
            return False
        if self.pattern == PatternType.ANY:
            return self.name is None or self.name == r.name
        if self.pattern == PatternType.MATCH:
            if self.name is None:
                return True
            if r.pattern == PatternType.LITERAL:
                return r.name in (self.name, WILDCARD)
            return r.pattern == PatternType.PREFIXED and self.name.startswith(r.name)
        return self.pattern == r.pattern and (self.name is None or self.name == r.name)

    def matches_entry(self, e: Entry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and (self.operation == Operation.ANY or self.operation == e.operation)
            and (self.permission == Permission.ANY or self.permission == e.permission)
        )

    def matches(self, b: Binding) -> bool:
        return self.matches_resource(b.resource) and self.matches_entry(b.entry)


def invalid_binding(b: Binding) -> str | None:
    """Why Kafka refuses to create ``b`` (INVALID_REQUEST), or None."""
    r, e = b.resource, b.entry
    if r.type in (ResourceType.UNKNOWN, ResourceType.ANY) or r.type not in ResourceType:
        return "Invalid resource type"
    if r.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid resource pattern type"
    if not r.name:
        return "Resource name must not be empty"
    if r.type == ResourceType.CLUSTER and r.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if e.operation in (Operation.UNKNOWN, Operation.ANY):
        return "Invalid operation"
    if e.permission not in (Permission.ALLOW, Permission.DENY):
        return "Invalid permission type"
    if ":" not in e.principal:
        return f"Could not parse principal from `{e.principal}` (no colon is found)"
    if not e.host:
        return "Invalid host"
    return None


# ---- ZooKeeper JSON (kafka.security.authorizer.AclEntry) ------------------------------------
def entries_json(entries: list[Entry]) -> bytes:
    return json.dumps(
        {
            "version": 1,
            "acls": [
                {
                    "principal": e.principal,
                    "permissionType": camel(e.permission.name),
                    "operation": camel(e.operation.name),
                    "host": e.host,
                }
                for e in entries
            ],
        },
        separators=(",", ":"),
    ).encode()


def parse_entries(data: bytes | None) -> list[Entry]:
    """The ACL entries of a resource znode (entries Kafka could not parse are skipped)."""
    if not data:
        return []
    out = []
    for acl in json.loads(data).get("acls") or []:
        try:
            out.append(
                Entry(
                    str(acl["principal"]),
                    str(acl["host"]),
                    Operation(from_camel(Operation, str(acl["operation"]))),
                    Permission(from_camel(Permission, str(acl["permissionType"]))),
                )
            )
        except (KeyError, ValueError):
            continue
    return out
