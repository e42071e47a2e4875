"""Client quotas as Kafka's ZooKeeper mode keeps and resolves them.

Entities and their znodes (names sanitized as Kafka's ``Sanitizer``; ``<default>`` is the
default entity): ``/config/users/<u>``, ``/config/users/<u>/clients/<c>``,
``/config/clients/<c>``, each holding ``{"version":1,"config":{"producer_byte_rate":"1048576"}}``.
An entity is a ``(user, client_id)`` pair of sanitized names, ``None`` where the entity has no
such part. :meth:`QuotaConfigs.resolve` walks Kafka's eight levels of precedence (user+client,
user+default client, user, default user+client, default user+default client, default user,
client, default client) and returns the quota with the metric tags Kafka groups usage by.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.common.sanitizer import desanitize, sanitize

DEFAULT = "<default>"  # ConfigEntityName.Default
USER = "user"  # ClientQuotaEntity.USER
CLIENT_ID = "client-id"  # ClientQuotaEntity.CLIENT_ID
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# key -> Kafka's ConfigDef type (LONG values must be whole numbers)
QUOTA_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}

Entity = tuple[str | None, str | None]  # sanitized (user, client-id); DEFAULT for a default


class QuotaError(ValueError):
    """An invalid entity, key or value (Kafka answers INVALID_REQUEST with this message)."""


def entity_path(entity: Entity) -> str:
    """``users/<u>``, ``users/<u>/clients/<c>`` or ``clients/<c>`` (below ``/config``; also
    the ``entity_path`` of the change notification)."""
    user, client = entity
    if user is not None and client is not None:
        return f"users/{user}/clients/{client}"
    if user is not None:
        return f"users/{user}"
    if client is not None:
        return f"clients/{client}"
    raise QuotaError("Invalid empty client quota entity")


def parse_entity_path(path: str) -> Entity | None:
    """The entity of a change notification's ``entity_path`` (None: not a quota entity)."""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "users":
        return (parts[1], None)
    if len(parts) == 2 and parts[0] == "clients":
        return (None, parts[1])
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return (parts[1], parts[3])
    return None


def entity_from_parts(parts: Iterable[tuple[str, str | None]]) -> Entity:
    """An entity from the protocol's (entity_type, entity_name) list; a null name is the
    default entity. Raises QuotaError with Kafka's message for what Kafka refuses."""
    user: str | None = None
    client: str | None = None
    seen: set[str] = set()
    for etype, name in parts:
        if etype in seen:
            raise QuotaError(f"Duplicate {etype} entity type in client quota entity")
        seen.add(etype)
        if etype not in (USER, CLIENT_ID):
            if etype == IP:
                raise QuotaError("IP quotas are not supported")
            raise QuotaError(f"Unhandled client quota entity type: {etype}")
        if name is not None and name == "":
            raise QuotaError(f"Empty {etype} not supported")
        value = DEFAULT if name is None else sanitize(name)
        if etype == USER:
            user = value
        else:
            client = value
    if user is None and client is None:
        raise QuotaError("Invalid empty client quota entity")
    return (user, client)


def entity_parts(entity: Entity) -> list[tuple[str, str | None]]:
    """The protocol's (entity_type, entity_name) list of an entity (default: null name)."""
    out: list[tuple[str, str | None]] = []
    for etype, name in ((USER, entity[0]), (CLIENT_ID, entity[1])):
        if name is not None:
            out.append((etype, None if name == DEFAULT else desanitize(name)))
    return out


def validate_value(key: str, value: float) -> str:
    """The znode string of ``key=value``; QuotaError as Kafka's AlterClientQuotas answers."""
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise QuotaError(f"Configuration {key} must be a positive number, got {value}")
    if kind == "LONG":
        whole = int(value + 1e-6)
        if abs(whole - value) > 1e-6:
            raise QuotaError(f"Configuration {key} must be a LONG value")
        return str(whole)
    return repr(float(value))


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's znode config as numbers (other keys, e.g. SCRAM
    credentials, and unreadable values are left out)."""
    out: dict[str, float] = {}
    for key, text in config.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = float(text)
            except ValueError:
                continue
    return out


@dataclass(frozen=True, slots=True)
class Resolved:
    """The quota in force for a client: its limit and the (user, client-id) tags of the
    sensor its usage is recorded in (empty strings where the entity has no such part)."""

    limit: float
    user_tag: str
    client_tag: str


class QuotaConfigs:
    """Every quota entity's values; resolution as Kafka's DefaultQuotaCallback."""

    def __init__(self) -> None:
        self.entities: dict[Entity, dict[str, float]] = {}
        self._keys_in_use: set[str] = set()
        self._resolved: dict[tuple[str, str, str], Resolved | None] = {}

    def set(self, entity: Entity, values: Mapping[str, float]) -> None:
        if values:
            self.entities[entity] = dict(values)
        else:
            self.entities.pop(entity, None)
        self._changed()

    def replace(self, entities: Mapping[Entity, Mapping[str, float]]) -> None:
        self.entities = {e: dict(v) for e, v in entities.items() if v}
        self._changed()

    def _changed(self) -> None:
        self._keys_in_use = {k for v in self.entities.values() for k in v}
        self._resolved.clear()

    def enabled(self, key: str) -> bool:
        """Whether any entity sets ``key`` (else nothing needs recording, as Kafka)."""
        return key in self._keys_in_use

    def resolve(self, key: str, user: str, client_id: str) -> Resolved | None:
        """The quota of ``key`` for principal name ``user`` and ``client_id`` (None: none)."""
        memo = (key, user, client_id)
        if memo in self._resolved:
            return self._resolved[memo]
        if len(self._resolved) > 10_000:
            self._resolved.clear()
        u, c = sanitize(user), sanitize(client_id)
        found: Resolved | None = None
        for ent in (
            (u, c),
            (u, DEFAULT),
            (u, None),
            (DEFAULT, c),
            (DEFAULT, DEFAULT),
            (DEFAULT, None),
            (None, c),
            (None, DEFAULT),
        ):
            limit = self.entities.get(ent, {}).get(key)
            if limit is not None:
                found = Resolved(
                    limit,
                    user if ent[0] is not None else "",
                    client_id if ent[1] is not None else "",
                )
                break
        self._resolved[memo] = found
        return found
