"""Tagged fields: unknown tags are skipped on decode, default-valued tags are omitted on encode."""

from __future__ import annotations

from typing import Any

from services.common.protocol import (
    ApiKey,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
)

from .helpers import decode_body, encode_body


def _produce_response(**partition_extra: Any) -> dict[str, Any]:
    partition = {
        "index": 3,
        "error_code": 0,
        "base_offset": 100,
        "log_append_time": -1,
        "log_start_offset": 0,
        "record_errors": [],
        "error_message": None,
        **partition_extra,
    }
    return {"responses": [{"name": "t", "partition_responses": [partition]}], "throttle_time": 0}


def test_unknown_tags_of_a_newer_version_are_skipped() -> None:
    # ProduceResponse v10 = v9 + tagged fields (KIP-951); a v9 reader sees them as unknown tags,
    # at the top level (node_endpoints, tag 0) and in a nested struct (current_leader, tag 0).
    v10 = _produce_response(current_leader={"leader_id": 2, "leader_epoch": 7})
    v10["node_endpoints"] = [{"node_id": 2, "host": "h", "port": 9092, "rack": None}]
    raw = encode_body(ApiKey.PRODUCE, 10, "response", v10)
    assert raw != encode_body(ApiKey.PRODUCE, 9, "response", _produce_response())
    decoded, end = decode_body(ApiKey.PRODUCE, 9, "response", raw)
    assert end == len(raw)
    assert decoded == _produce_response()
    # ...and the v10 reader decodes them.
    assert decode_body(ApiKey.PRODUCE, 10, "response", raw)[0] == v10


def test_unknown_tags_interleaved_with_known_ones() -> None:
    # DescribeClusterRequest v0: include_cluster_authorized_operations + tagged section.
    body = bytes([1])  # include_cluster_authorized_operations = True
    tags = bytes([3, 1, 3]) + b"abc" + bytes([90, 0]) + bytes([200, 1, 2]) + b"\x00\x00"
    decoded, end = decode_body(ApiKey.DESCRIBE_CLUSTER, 0, "request", body + tags)
    assert decoded == {"include_cluster_authorized_operations": True}
    assert end == len(body + tags)  # tag 200 is a 2-byte varint (0xC8 0x01)

    # FetchRequest v12 knows tag 0 (cluster_id) at the top level: known + unknown together.
    plain = encode_body(ApiKey.FETCH, 12, "request", {"cluster_id": None})
    assert plain[-1] == 0  # empty top-level tag section
    known = bytes([0, 4, 4]) + b"abc"  # tag 0, size 4, compact string "abc"
    unknown = bytes([7, 2]) + b"zz"
    raw = plain[:-1] + bytes([2]) + known + unknown
    decoded, end = decode_body(ApiKey.FETCH, 12, "request", raw)
    assert decoded["cluster_id"] == "abc"
    assert end == len(raw)


def test_default_valued_tags_are_omitted() -> None:
    base = encode_body(ApiKey.PRODUCE, 10, "response", _produce_response())
    explicit_defaults = _produce_response(current_leader={"leader_id": -1, "leader_epoch": -1})
    explicit_defaults["node_endpoints"] = []
    assert encode_body(ApiKey.PRODUCE, 10, "response", explicit_defaults) == base
    partial = _produce_response(current_leader={"leader_epoch": -1})
    assert encode_body(ApiKey.PRODUCE, 10, "response", partial) == base
    # No tags at all: byte-identical to the tag-less v9 layout.
    assert base == encode_body(ApiKey.PRODUCE, 9, "response", _produce_response())


def test_api_versions_v3_response_has_no_default_tags() -> None:
    # librdkafka 2.0.2 misreads ApiVersions v3 tagged fields; defaults must not be sent.
    body = {
        "error_code": 0,
        "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 9}],
        "throttle_time": 0,
        "supported_features": [],
        "finalized_features_epoch": -1,
        "finalized_features": [],
        "zk_migration_ready": False,
    }
    frame = encode_response(ApiKey.API_VERSIONS, 3, 9, body)
    # size, correlation id (header v0: no tag byte), error, 1 api key, throttle, empty tags
    expected_body = b"\x00\x00" + b"\x02" + b"\x00\x00\x00\x03\x00\x09\x00" + b"\x00" * 4 + b"\x00"
    assert frame[4:8] == (9).to_bytes(4, "big")
    assert frame[8:] == expected_body
    with_tag = encode_response(ApiKey.API_VERSIONS, 3, 9, {**body, "zk_migration_ready": True})
    assert with_tag[-5:] == b"\x00\x01\x03\x01\x01"  # throttle end; 1 tag: id 3, size 1, true
    assert decode_response(ApiKey.API_VERSIONS, 3, with_tag[4:])[1]["zk_migration_ready"] is True


def test_request_header_v2_unknown_tags_are_skipped() -> None:
    frame = bytearray(encode_request(ApiKey.METADATA, 12, 5, "cid", {"topics": None})[4:])
    tag_pos = 8 + 2 + 3
    assert frame[tag_pos] == 0
    frame[tag_pos : tag_pos + 1] = bytes([1, 12, 2]) + b"hi"
    header, offset = parse_request_header(bytes(frame))
    assert header.client_id == "cid"
    assert offset == tag_pos + 5
