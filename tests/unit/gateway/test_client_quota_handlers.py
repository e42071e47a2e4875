"""DescribeClientQuotas / AlterClientQuotas on a real ZooKeeper, and a gateway's QuotaSync
following the changes (Kafka's filter semantics and error codes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.common.client_quotas import DEFAULT, PRODUCER_BYTE_RATE, QuotaConfigs
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.zk.client import AsyncZk
from services.common.zk.user_configs import read_entity_config
from services.gateway.context import GatewayServices
from services.gateway.handlers.client_quotas import ALTER_HANDLER, DESCRIBE_HANDLER
from services.gateway.quota_sync import QuotaSync

from .fakes import context, services

USER, CLIENT = "user", "client-id"


@pytest.fixture
async def svc(zk_connect: str) -> AsyncIterator[GatewayServices]:
    s = services()
    s.zk = AsyncZk(zk_connect)
    await s.zk.start()
    await s.zk.ensure_layout()
    yield s
    await s.zk.stop()


def _entity(*parts: tuple[str, str | None]) -> list[dict[str, Any]]:
    return [{"entity_type": t, "entity_name": n} for t, n in parts]


async def _alter(svc: GatewayServices, entries: list[Any], validate_only: bool = False) -> Any:
    req = {"entries": entries, "validate_only": validate_only}
    return (await ALTER_HANDLER.handle(context(svc, ApiKey.ALTER_CLIENT_QUOTAS, 1), req))["entries"]


async def _set(svc: GatewayServices, key: str, value: float, *parts: Any) -> None:
    res = await _alter(
        svc, [{"entity": _entity(*parts), "ops": [{"key": key, "value": value, "remove": False}]}]
    )
    assert res[0]["error_code"] == 0, res


async def _describe(svc: GatewayServices, components: list[Any], strict: bool) -> Any:
    req = {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict,
    }
    return await DESCRIBE_HANDLER.handle(context(svc, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1), req)


def _entities(resp: Any) -> set[tuple[tuple[str, str | None], ...]]:
    assert resp["error_code"] == 0, resp
    return {
        tuple((e["entity_type"], e["entity_name"]) for e in x["entity"]) for x in resp["entries"]
    }


async def test_describe_filters_as_kafka(svc: GatewayServices) -> None:
    await _set(svc, PRODUCER_BYTE_RATE, 100, (USER, "alice"))
    await _set(svc, PRODUCER_BYTE_RATE, 200, (USER, "alice"), (CLIENT, "c1"))
    await _set(svc, PRODUCER_BYTE_RATE, 300, (USER, None), (CLIENT, None))
    await _set(svc, "request_percentage", 12.5, (CLIENT, "c1"))
    await _set(svc, "consumer_byte_rate", 400, (CLIENT, None))
    alice, alice_c1 = ((USER, "alice"),), ((USER, "alice"), (CLIENT, "c1"))
    dflt_both, c1, dflt_client = (
        ((USER, None), (CLIENT, None)),
        ((CLIENT, "c1"),),
        ((CLIENT, None),),
    )
    # exact user, not strict: the user alone and with any client id
    assert _entities(await _describe(svc, [(USER, 0, "alice")], False)) == {alice, alice_c1}
    # strict: only entities with no other part
    assert _entities(await _describe(svc, [(USER, 0, "alice")], True)) == {alice}
    # any named client id, strict: the client-only entities (default included)
    assert _entities(await _describe(svc, [(CLIENT, 2, None)], True)) == {c1, dflt_client}
    # the default user with any client id
    assert _entities(await _describe(svc, [(USER, 1, None), (CLIENT, 2, None)], True)) == {
        dflt_both
    }
    assert _entities(await _describe(svc, [], False)) == {
        alice,
        alice_c1,
        dflt_both,
        c1,
        dflt_client,
    }
    resp = await _describe(svc, [(CLIENT, 0, "c1")], True)
    assert resp["entries"][0]["values"] == [{"key": "request_percentage", "value": 12.5}]
    # stored as Kafka: strings in the znode, <default> for a default entity
    config, _ = await read_entity_config(svc.zk, "users/<default>/clients/<default>")  # type: ignore[arg-type]
    assert config == {PRODUCER_BYTE_RATE: "300"}


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ([(USER, 2, None), (USER, 0, "a")], ErrorCode.INVALID_REQUEST, "Duplicate user"),
        ([("", 2, None)], ErrorCode.INVALID_REQUEST, "Unexpected empty"),
        ([("group", 2, None)], ErrorCode.UNSUPPORTED_VERSION, "Custom entity type 'group'"),
        ([(USER, 0, None)], ErrorCode.INVALID_REQUEST, "MATCH_TYPE_EXACT"),
        ([(USER, 1, "a")], ErrorCode.INVALID_REQUEST, "also specified a match"),
        ([(USER, 7, None)], ErrorCode.INVALID_REQUEST, "Unexpected match type"),
        ([("ip", 2, None), (USER, 2, None)], ErrorCode.INVALID_REQUEST, "IP filter component"),
    ],
)
async def test_describe_refusals(
    svc: GatewayServices, components: list[Any], code: ErrorCode, message: str
) -> None:
    resp = await _describe(svc, components, False)
    assert resp["error_code"] == code and message in resp["error_message"]
    assert resp["entries"] is None


async def test_alter_validation_per_entry_and_validate_only(svc: GatewayServices) -> None:
    op = [{"key": PRODUCER_BYTE_RATE, "value": 10.0, "remove": False}]
    res = await _alter(
        svc,
        [
            {"entity": _entity((CLIENT, "ok")), "ops": op},
            {"entity": _entity((CLIENT, "")), "ops": op},
            {"entity": [], "ops": op},
            {"entity": _entity((CLIENT, "k")), "ops": [{"key": "x", "value": 1.0, "remove": True}]},
            {
                "entity": _entity((CLIENT, "n")),
                "ops": [{"key": PRODUCER_BYTE_RATE, "value": -1.0, "remove": False}],
            },
        ],
    )
    assert [(r["error_code"], r["error_message"]) for r in res] == [
        (0, None),
        (42, "Empty client-id not supported"),
        (42, "Invalid empty client quota entity"),
        (42, "Invalid configuration key x"),
        (42, "Configuration producer_byte_rate must be a positive number, got -1.0"),
    ]
    res = await _alter(svc, [{"entity": _entity((CLIENT, "v")), "ops": op}], validate_only=True)
    assert res[0]["error_code"] == 0
    assert await svc.zk.exists("/config/clients/v") is None  # type: ignore[union-attr]
    # remove: the key goes, the znode stays (as Kafka's changeConfigs)
    await _alter(
        svc,
        [
            {
                "entity": _entity((CLIENT, "ok")),
                "ops": [{"key": PRODUCER_BYTE_RATE, "value": 0.0, "remove": True}],
            }
        ],
    )
    assert await read_entity_config(svc.zk, "clients/ok") == ({}, 1)  # type: ignore[arg-type]


async def test_quota_sync_follows_notifications(svc: GatewayServices) -> None:
    await _set(svc, PRODUCER_BYTE_RATE, 100, (CLIENT, "before"))
    configs = QuotaConfigs()
    assert svc.zk is not None
    sync = QuotaSync(svc.zk, configs)
    await sync.start()
    try:
        assert configs.entities == {(None, "before"): {PRODUCER_BYTE_RATE: 100.0}}
        await _set(svc, PRODUCER_BYTE_RATE, 5, (USER, "a b"), (CLIENT, None))
        await svc.zk.create(
            "/config/changes/config_change_",
            b'{"version":2,"entity_path":"topics/t"}',
            sequence=True,
        )
        for _ in range(100):
            if ("a%20b", DEFAULT) in configs.entities:
                break
            await asyncio.sleep(0.05)
        assert configs.entities[("a%20b", DEFAULT)] == {PRODUCER_BYTE_RATE: 5.0}
        quota = configs.resolve(PRODUCER_BYTE_RATE, "a b", "any")
        assert quota is not None and quota.limit == 5.0
        await _alter(
            svc,
            [
                {
                    "entity": _entity((CLIENT, "before")),
                    "ops": [{"key": PRODUCER_BYTE_RATE, "value": 0.0, "remove": True}],
                }
            ],
        )
        for _ in range(100):
            if (None, "before") not in configs.entities:
                break
            await asyncio.sleep(0.05)
        assert (None, "before") not in configs.entities
    finally:
        sync.stop()
