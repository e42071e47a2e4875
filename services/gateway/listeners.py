"""The gateway's Kafka listeners: ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map`` as Kafka reads them.

``listeners`` is ``NAME://host:port[,NAME://host:port...]`` (a bare ``host:port`` is one
PLAINTEXT listener); each name maps to a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL) through ``listener.security.protocol.map``, whose default maps each protocol name to
itself. ``advertised.listeners`` names a subset of the listeners (port 0 or a wildcard host:
the bound port / this host's name).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from services.common.listeners import ANY_HOSTS, ListenerAddress
from services.common.listeners import parse_listener as _parse_one
from services.common.settings import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # upper case, as Kafka normalises listener names
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def address(self) -> ListenerAddress:
        return ListenerAddress(self.host, self.port)


def parse_protocol_map(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip() or proto not in PROTOCOLS:
            raise ConfigError(
                f"invalid setting listener.security.protocol.map: {item!r} is not "
                f"NAME:PROTOCOL with PROTOCOL one of {', '.join(PROTOCOLS)}"
            )
        out[name.strip().upper()] = proto
    return out


def parse_listeners(value: str, prop: str, protocol_map: dict[str, str]) -> list[Listener]:
    """Every listener of ``value``; errors are one readable line naming ``prop``."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ConfigError(f"invalid setting {prop}: no listener in {value!r}")
    out: list[Listener] = []
    for item in items:
        name, sep, _ = item.partition("://")
        name = name.upper() if sep else "PLAINTEXT"
        proto = protocol_map.get(name)
        if proto is None:
            raise ConfigError(
                f"invalid setting {prop}: listener {name} has no entry in "
                "listener.security.protocol.map"
            )
        addr = _parse_one(item, prop, (name,))
        if any(lst.name == name for lst in out):
            raise ConfigError(f"invalid setting {prop}: listener {name} named twice")
        out.append(Listener(name, proto, addr.host, addr.port))
    return out


def advertised_addresses(
    listeners: list[Listener], advertised: list[Listener] | None, bound: dict[str, int]
) -> dict[str, ListenerAddress]:
    """Listener name -> the address clients are told: advertised.listeners where it names the
    listener, else the listener itself; port 0 -> the bound port, wildcard host -> this host."""
    adv_by_name = {a.name: a for a in advertised or []}
    unknown = set(adv_by_name) - {lst.name for lst in listeners}
    if unknown:
        raise ConfigError(
            f"invalid setting advertised.listeners: {', '.join(sorted(unknown))} "
            "is not in listeners"
        )
    out: dict[str, ListenerAddress] = {}
    for lst in listeners:
        a = adv_by_name.get(lst.name, lst)
        host = a.host if a.host not in ANY_HOSTS else socket.getfqdn()
        out[lst.name] = ListenerAddress(host, a.port or bound.get(lst.name, 0))
    return out
