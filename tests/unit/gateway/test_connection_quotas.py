"""max.connections / max.connections.per.ip(.overrides) accounting of a gateway."""

from __future__ import annotations

from services.gateway.connection_quotas import ConnectionQuotas
from services.gateway.metrics import CONNECTIONS_REJECTED


def _rejected(reason: str) -> float:
    return CONNECTIONS_REJECTED.labels(reason)._value.get()


def test_per_ip_limit_and_overrides() -> None:
    q = ConnectionQuotas(max_per_ip=2, ip_overrides={"10.0.0.9": 0, "10.0.0.5": 3})
    before = _rejected("max_connections_per_ip")
    assert [q.admit("10.0.0.1") for _ in range(3)] == [True, True, False]
    assert [q.admit("10.0.0.5") for _ in range(4)] == [True, True, True, False]
    assert q.admit("10.0.0.9") is False
    assert _rejected("max_connections_per_ip") - before == 3
    assert q.total == 5 and q.count("10.0.0.1") == 2
    q.release("10.0.0.1")
    assert q.admit("10.0.0.1") is True
    q.configure(2**31 - 1, 1, {})  # lowered: open connections stay, new ones are refused
    assert q.admit("10.0.0.5") is False and q.count("10.0.0.5") == 3


def test_max_connections_counts_every_address() -> None:
    q = ConnectionQuotas(max_connections=3)
    before = _rejected("max_connections")
    assert [q.admit(f"10.0.1.{i}") for i in range(5)] == [True, True, True, False, False]
    assert _rejected("max_connections") - before == 2
    q.release("10.0.1.0")
    q.release("10.0.1.0")  # a second release of an address is harmless
    assert q.total == 2
    assert q.admit("10.0.1.7") is True and q.admit("10.0.1.8") is False


async def test_override_hosts_resolve_to_addresses() -> None:
    from services.gateway.dynamic_config import resolve_hosts

    got = await resolve_hosts({"localhost": 3, "10.0.0.1": 2, "no-such-host.invalid": 1})
    assert got["127.0.0.1"] == 3 and got["10.0.0.1"] == 2
    assert "no-such-host.invalid" not in got and len(set(got.values()) - {2, 3}) == 0
