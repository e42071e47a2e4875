"""How values are represented: records as memoryview slices, uuids as bytes, encode errors."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from services.common.protocol import (
    ApiKey,
    EncodeError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
)

from .helpers import decode_body, encode_body


def _produce(records: Any) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
    }


def test_records_are_zero_copy_memoryview_slices() -> None:
    batch = bytes(range(200))
    frame = bytearray(encode_request(ApiKey.PRODUCE, 9, 1, "c", _produce(batch))[4:])
    header, offset = parse_request_header(frame)
    body = decode_request(header.api_key, header.api_version, frame, offset)
    records = body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview)
    assert records == batch
    assert records.obj is frame  # a view into the caller's buffer, not a copy
    records[0] = 0xAA  # writable when the input was a bytearray (in-place offset rewrite)
    assert frame[frame.index(bytes(range(1, 200))) - 1] == 0xAA
    # null records stay None; memoryview/bytearray inputs encode like bytes
    assert decode_body(
        ApiKey.PRODUCE, 9, "request", encode_body(ApiKey.PRODUCE, 9, "request", _produce(None))
    )[0] == _produce(None)
    assert encode_body(ApiKey.PRODUCE, 3, "request", _produce(memoryview(batch))) == encode_body(
        ApiKey.PRODUCE, 3, "request", _produce(bytearray(batch))
    )


def test_bytes_fields_decode_as_bytes_and_uuids_as_16_bytes() -> None:
    topic_id = uuid.uuid4()
    response = {"topics": [{"name": "t", "topic_id": topic_id, "partitions": []}]}
    _, body = decode_response(
        ApiKey.METADATA, 12, encode_response(ApiKey.METADATA, 12, 1, response)[4:]
    )
    assert body["topics"][0]["topic_id"] == topic_id.bytes  # uuid.UUID accepted on encode
    missing = {"topics": [{"name": "t", "partitions": []}]}
    _, body = decode_response(
        ApiKey.METADATA, 12, encode_response(ApiKey.METADATA, 12, 1, missing)[4:]
    )
    assert body["topics"][0]["topic_id"] == bytes(16)  # missing/None uuid = zero UUID
    auth = {"mechanism_name": "PLAIN", "auth_bytes": b"\x00user\x00pw"}
    decoded, _ = decode_body(
        ApiKey.SASL_AUTHENTICATE,
        2,
        "request",
        encode_body(ApiKey.SASL_AUTHENTICATE, 2, "request", auth),
    )
    assert type(decoded["auth_bytes"]) is bytes


def test_defaults_fill_missing_keys_at_every_level() -> None:
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 4}]}]}
    _, decoded = decode_response(
        ApiKey.METADATA, 12, encode_response(ApiKey.METADATA, 12, 1, body)[4:]
    )
    partition = decoded["topics"][0]["partitions"][0]
    assert partition == {
        "error_code": 0,
        "partition_index": 4,
        "leader_id": 0,
        "leader_epoch": -1,
        "replica_nodes": [],
        "isr_nodes": [],
        "offline_replicas": [],
    }
    assert decoded["controller_id"] == -1 and decoded["cluster_id"] is None
    assert decoded["topics"][0]["topic_authorized_operations"] == -(2**31)


def test_large_arrays_and_long_strings_take_the_slow_paths() -> None:
    replicas = list(range(300))  # compact count >= 128: no packed Struct for the run
    body = {
        "topics": [
            {
                "name": "x" * 300,
                "partitions": [
                    {"partition_index": 1, "replica_nodes": replicas, "isr_nodes": replicas[:5]}
                ],
            }
        ]
    }
    _, decoded = decode_response(
        ApiKey.METADATA, 12, encode_response(ApiKey.METADATA, 12, 1, body)[4:]
    )
    assert decoded["topics"][0]["name"] == "x" * 300
    assert decoded["topics"][0]["partitions"][0]["replica_nodes"] == replicas


@pytest.mark.parametrize(
    "key,version,body",
    [
        (ApiKey.METADATA, 4, {"topics": [{"name": 5}]}),
        (ApiKey.METADATA, 4, {"topics": [{"name": "x" * 40000}]}),  # > int16 string length
        (ApiKey.METADATA, 4, {"topics": [None]}),
        (ApiKey.METADATA, 4, {"allow_auto_topic_creation": "yes", "topics": 3}),
        (ApiKey.PRODUCE, 3, {"acks": 1 << 20}),
        (ApiKey.PRODUCE, 3, {"topic_data": [{"name": None}]}),
        (ApiKey.METADATA, 12, {"topics": [{"topic_id": b"short"}]}),
        (ApiKey.FETCH, 4, {"topics": [{"partitions": [{"partition": "0"}]}]}),
    ],
)
def test_bad_values_raise_encode_error(key: int, version: int, body: dict[str, Any]) -> None:
    with pytest.raises(EncodeError):
        encode_request(key, version, 1, None, body)


def test_non_ascii_strings() -> None:
    body = {"topics": [{"name": "tópico-ß-日本"}], "allow_auto_topic_creation": False}
    frame = encode_request(ApiKey.METADATA, 8, 1, "clïent", body)[4:]
    header, offset = parse_request_header(frame)
    assert header.client_id == "clïent"
    decoded = decode_request(ApiKey.METADATA, 8, frame, offset)
    assert decoded["topics"][0]["name"] == "tópico-ß-日本"
