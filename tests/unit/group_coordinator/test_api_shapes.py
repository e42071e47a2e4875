"""Every response the coordinator builds has exactly the fields of its API version's schema
(recursively) and survives the codec: encode_response_body + decode_response_body."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.common.coordinator.forward import fit
from services.common.errors import ErrorCode
from services.common.protocol import (
    decode_response_body,
    encode_response_body,
    message_spec,
)
from services.common.protocol.schema import EntitySpec

from .test_groups import Env, api, stable_group

ALL_VERSIONS = [(k, v) for k, (lo, hi) in api.SUPPORTED_VERSIONS.items() for v in range(lo, hi + 1)]


def assert_shape(spec: EntitySpec, data: dict[str, Any], path: str) -> None:
    assert set(data) == set(spec.field_names), f"{path}: {sorted(data)} != {spec.field_names}"
    for field in (*spec.fields, *spec.tagged):
        value = data[field.name]
        if field.entity is None or value is None:
            continue
        for i, item in enumerate(value if field.array else [value]):
            assert_shape(field.entity, item, f"{path}.{field.name}[{i}]")


def assert_wire(api_key: int, version: int, response: dict[str, Any]) -> None:
    assert_shape(message_spec(api_key, version, "response"), response, f"{api_key}v{version}")
    raw = encode_response_body(api_key, version, response)
    decoded, end = decode_response_body(api_key, version, raw)
    assert end == len(raw)
    assert decoded == response


def request(api_key: int, version: int) -> dict[str, Any]:
    """A request of every API touching group "g" (member "m"), one partition t-0."""
    if api_key == 27:
        marker = {
            "producer_id": 7,
            "topics": [{"name": "__consumer_offsets", "partition_indexes": [0]}],
        }
        return {"markers": [marker]}
    if api_key in (8, 28):
        body: dict[str, Any] = {
            "group_id": "g",
            "generation_id_or_member_epoch": 1,
            "member_id": "m",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}],
        }
    elif api_key == 9:
        topics = [{"name": "t", "partition_indexes": [0, 1]}]
        body = (
            {"groups": [{"group_id": "g", "topics": topics}, {"group_id": "h", "topics": None}]}
            if version >= 8
            else {"group_id": "g", "topics": topics}
        )
    elif api_key == 15:
        body = {"groups": ["g", "h"]}
    elif api_key == 42:
        body = {"groups_names": ["g", "h"]}
    elif api_key == 47:
        body = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    else:
        body = {"group_id": "g", "member_id": "m"}
    return body


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.UNKNOWN_SERVER_ERROR])
def test_error_response_shape(api_key: int, version: int, code: ErrorCode) -> None:
    response = api.error_response(api_key, version, request(api_key, version), code)
    assert_wire(api_key, version, response)
    codes = _error_codes(response)
    assert codes and set(codes) == {int(code)}


def _error_codes(data: Any) -> list[int]:
    if isinstance(data, dict):
        out = [v for k, v in data.items() if k == "error_code"]
        for v in data.values():
            out += _error_codes(v)
        return out
    if isinstance(data, list):
        return [c for item in data for c in _error_codes(item)]
    return []


async def test_handled_response_shapes_every_version() -> None:
    """Real answers of every API and version, from a group with members and offsets."""
    env = Env()
    (member,) = await stable_group(env, "g", 1)
    await env.commit("g", {("t", 0): 5}, member, 1, metadata="md")
    await env.commit("s", {("t", 0): 5})
    seen: list[tuple[int, int]] = []
    for api_key, version in ALL_VERSIONS:
        responses = await _exercise(env, api_key, version, member)
        assert responses
        for response in responses:
            assert_wire(api_key, version, response)
        seen.append((api_key, version))
    assert seen == ALL_VERSIONS


async def _exercise(env: Env, api_key: int, version: int, member: str) -> list[dict[str, Any]]:
    if api_key == 11:
        group = f"join-{version}"
        first = await env.join(group, version=version)
        out = [first]
        if first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
            out.append(await env.join(group, first["member_id"], version=version))
        assert out[-1]["error_code"] == 0 and out[-1]["members"]
        out.append(await env.join(group, "unknown", version=version))
        return out
    if api_key == 14:
        return [
            await env.sync("g", member, 1, version=version),
            await env.sync("g", "ghost", 1, version=version),
        ]
    if api_key == 12:
        r = await env.call(12, version, group_id="g", member_id=member, generation_id=1)
        assert r["error_code"] == 0
        return [r]
    if api_key == 13:
        if version < 3:
            return [await env.call(13, version, group_id="g", member_id="ghost")]
        ghost = {"member_id": "ghost", "group_instance_id": None}
        return [await env.call(13, version, group_id="g", members=[ghost])]
    if api_key == 8:
        partitions: list[dict[str, Any]] = [
            {"partition_index": 0, "committed_offset": 6, "committed_metadata": None}
        ]
        return [
            await env.call(
                8,
                version,
                group_id="g",
                generation_id_or_member_epoch=1,
                member_id=member,
                topics=[{"name": "t", "partitions": partitions}],
            )
        ]
    if api_key == 28:
        partitions = [{"partition_index": 0, "committed_offset": 6, "committed_metadata": None}]
        return [
            await env.call(
                28,
                version,
                transactional_id="tx",
                group_id="g",
                producer_id=77,
                producer_epoch=0,
                topics=[{"name": "t", "partitions": partitions}],
            )
        ]
    if api_key == 27:
        topics = [{"name": "__consumer_offsets", "partition_indexes": [0]}]
        marker = {"producer_id": 77, "producer_epoch": 0, "transaction_result": True,
                  "topics": topics, "coordinator_epoch": 1}  # fmt: skip
        r = await env.call(27, version, markers=[marker])
        assert r["markers"][0]["topics"][0]["partitions"][0]["error_code"] == 0
        return [r]
    if api_key == 9:
        if version >= 8:
            groups = [
                {"group_id": "g", "topics": None},
                {"group_id": "s", "topics": [{"name": "t", "partition_indexes": [0, 9]}]},
            ]
            return [await env.call(9, version, groups=groups)]
        out = [await env.fetch("g", {"t": [0, 3]}, version=version)]
        if version >= 2:
            out.append(await env.fetch("g", None, version=version))
        return out
    if api_key == 15:
        extra = {"include_authorized_operations": True} if version >= 3 else {}
        return [await env.call(15, version, groups=["g", "missing"], **extra)]
    if api_key == 16:
        r = await env.call(16, version)
        assert {g["group_id"] for g in r["groups"]} >= {"g", "s"}
        return [r]
    if api_key == 42:
        return [await env.call(42, version, groups_names=["g", "missing"])]
    if api_key == 47:
        topics = [{"name": "t", "partitions": [{"partition_index": 0}]}]
        return [
            await env.call(47, version, group_id="g", topics=topics),
            await env.call(47, version, group_id="missing", topics=topics),
        ]
    raise AssertionError(api_key)


async def test_unexpected_failure_answers_unknown_server_error() -> None:
    env = Env()

    def boom(*args: Any) -> ErrorCode:
        raise RuntimeError("boom")

    env.shard.heartbeat = boom  # type: ignore[method-assign,assignment]
    r = await env.call(12, 4, group_id="g", member_id="m", generation_id=1)
    assert r == {"throttle_time": 0, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR}
    unsupported = await api.handle(env.lookup, 8, 9, request(8, 9), client_id="c", client_host="h")
    assert unsupported["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    await asyncio.sleep(0)


def test_fit_cuts_flat_array_items_only_when_they_carry_other_fields() -> None:
    """OffsetCommit v2's response has no throttle_time; a partition entry carrying a field the
    schema lacks is cut to the schema's, one that carries none is kept as it is (not copied)."""
    spec = message_spec(8, 2, "response")
    exact = {"partition_index": 0, "error_code": 0}
    extra = {"partition_index": 1, "error_code": 22, "committed_offset": 5}
    out = fit(spec, {"throttle_time": 0, "topics": [{"name": "t", "partitions": [exact, extra]}]})
    assert out == {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": 0},
                    {"partition_index": 1, "error_code": 22},
                ],
            }
        ]
    }
    assert out["topics"][0]["partitions"][0] is exact
    assert_shape(spec, out, "8v2")
