"""encode_response_chunks: the same frame as encode_response, record sets left uncopied."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.protocol import (
    ApiKey,
    encode_response,
    encode_response_chunks,
    message_spec,
)
from services.common.protocol.messages import LARGE_CHUNK

from .helpers import examples
from .strategies import entity_strategy


def _fetch_body(*records: bytes) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": i,
                        "error_code": 0,
                        "high_watermark": 9,
                        "last_stable_offset": 9,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": r,
                    }
                    for i, r in enumerate(records)
                ],
            }
        ],
    }


@pytest.mark.parametrize("version", [4, 11, 12])
def test_large_record_sets_are_their_own_chunks(version: int) -> None:
    big = bytes(range(256)) * (LARGE_CHUNK // 256 + 1)
    other = b"\x01" * LARGE_CHUNK
    body = _fetch_body(big, b"small", memoryview(other))
    chunks = encode_response_chunks(ApiKey.FETCH, version, 42, body)
    assert b"".join(chunks) == encode_response(ApiKey.FETCH, version, 42, body)
    # head, big, middle, other (+ the tagged-field tail of flexible versions)
    assert len(chunks) == (5 if version >= 12 else 4)
    assert chunks[1] is big and chunks[3] is body["responses"][0]["partitions"][2]["records"]
    assert int.from_bytes(chunks[0][:4], "big") == sum(map(len, chunks)) - 4


def test_small_response_is_one_chunk() -> None:
    body = _fetch_body(b"abc")
    assert encode_response_chunks(ApiKey.FETCH, 12, 1, body) == [
        encode_response(ApiKey.FETCH, 12, 1, body)
    ]


@pytest.mark.parametrize(
    "key,version",
    [(ApiKey.FETCH, 12), (ApiKey.PRODUCE, 9), (ApiKey.METADATA, 12), (ApiKey.API_VERSIONS, 3)],
)
@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_frame_as_encode_response(key: int, version: int, data: st.DataObject) -> None:
    body = data.draw(entity_strategy(message_spec(key, version, "response")))
    assert b"".join(encode_response_chunks(key, version, 5, body)) == encode_response(
        key, version, 5, body
    )
