"""storage_wire: Append requests and Fetch responses agree with the protobuf classes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.rpc.kafkapy.v1 import storage_pb2 as spb
from services.common.storage_wire import (
    EXCHANGE_APPEND,
    EXCHANGE_CANCEL,
    EXCHANGE_ERROR,
    EXCHANGE_FETCH,
    CallError,
    PartitionAppend,
    WireError,
    append_request,
    exchange_entry_parts,
    parse_exchange_responses,
    parse_fetch_response,
    varint,
)

INT32 = st.integers(-(2**31), 2**31 - 1)


def _expected(
    acks: int, timeout_ms: int, txn: str | None, parts: list[PartitionAppend]
) -> spb.AppendRequest:
    return spb.AppendRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        transactional_id=txn or "",
        partitions=[
            spb.PartitionAppend(
                topic=p.topic,
                partition=p.partition,
                records=bytes(p.records),
                current_leader_epoch=p.current_leader_epoch,
                verification_guard=p.verification_guard,
            )
            for p in parts
        ],
    )


def test_matches_protobuf_byte_for_byte() -> None:
    frame = b"....batch-one....batch-two"
    view = memoryview(frame)
    parts = [
        PartitionAppend("orders", 0, view[4:13]),
        PartitionAppend("orders", 7, view[17:]),
        PartitionAppend("ünïcode", 2, b"", 5),
        PartitionAppend("orders", 3, b"x", -1, 2**62),  # a KIP-890 verification guard
    ]
    raw = append_request(-1, 30000, "txn-1", parts)
    assert raw == _expected(-1, 30000, "txn-1", parts).SerializeToString()
    parsed = spb.AppendRequest.FromString(raw)
    assert parsed.partitions[0].records == b"batch-one"
    assert parsed.partitions[1].current_leader_epoch == -1 and parsed.transactional_id == "txn-1"


def test_defaults_are_left_out() -> None:
    assert append_request(0, 0, None, []) == b""
    assert append_request(1, 0, "", [PartitionAppend("", 0, b"", 0)]) == b"\x08\x01\x22\x00"


def test_varint() -> None:
    assert varint(0) == b"\x00" and varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"


@given(
    acks=st.sampled_from([-1, 0, 1]),
    timeout=INT32,
    txn=st.none() | st.text(max_size=20),
    parts=st.lists(
        st.builds(
            PartitionAppend,
            st.text(max_size=30),
            INT32,
            st.binary(max_size=300),
            INT32,
            st.integers(0, 2**62),
        ),
        max_size=5,
    ),
)
def test_any_request_round_trips(
    acks: int, timeout: int, txn: str | None, parts: list[PartitionAppend]
) -> None:
    raw = append_request(acks, timeout, txn, parts)
    assert spb.AppendRequest.FromString(raw) == _expected(acks, timeout, txn, parts)


def _fields(r: Any) -> tuple[Any, ...]:
    return (
        r.topic,
        r.partition,
        r.error_code,
        r.high_watermark,
        r.last_stable_offset,
        r.log_start_offset,
        bytes(r.records),
        [(a.producer_id, a.first_offset) for a in r.aborted_transactions],
        r.log_end_offset,
    )


INT64 = st.integers(-(2**63), 2**63 - 1)
RESULTS = st.builds(
    spb.PartitionFetchResult,
    topic=st.text(max_size=20),
    partition=INT32,
    error_code=INT32,
    high_watermark=INT64,
    last_stable_offset=INT64,
    log_start_offset=INT64,
    records=st.binary(max_size=200),
    log_end_offset=INT64,
    aborted_transactions=st.lists(
        st.builds(spb.AbortedTransaction, producer_id=INT64, first_offset=INT64), max_size=3
    ),
)


@given(results=st.lists(RESULTS, max_size=6))
def test_fetch_response_parses_like_protobuf(results: list[spb.PartitionFetchResult]) -> None:
    raw = spb.FetchResponse(partitions=results).SerializeToString()
    parsed = parse_fetch_response(raw)
    assert [_fields(r) for r in parsed.partitions] == [_fields(r) for r in results]


def test_fetch_records_are_views_and_unknown_fields_are_skipped() -> None:
    result = spb.PartitionFetchResult(
        topic="t", partition=3, records=b"R" * 1000, high_watermark=-1
    )
    # an unknown varint field (20) and an unknown length-delimited one (21), as a newer peer
    # might send them
    raw = spb.FetchResponse(partitions=[result]).SerializeToString()
    inner = result.SerializeToString() + b"\xa0\x01\x05" + b"\xaa\x01\x02ok"
    raw = b"\x0a" + varint(len(inner)) + inner + b"\x10\x07"
    (r,) = parse_fetch_response(raw).partitions
    assert isinstance(r.records, memoryview) and r.records == b"R" * 1000
    assert (r.topic, r.partition, r.high_watermark, r.log_end_offset) == ("t", 3, -1, 0)


@pytest.mark.parametrize("raw", [b"\x0a\x05ab", b"\x0a\x02\x08", b"\x0b", b"\x08" + b"\xff" * 11])
def test_fetch_response_malformed(raw: bytes) -> None:
    with pytest.raises(WireError):
        parse_fetch_response(raw)


# ---- Exchange ---------------------------------------------------------------------------------
@given(st.lists(st.tuples(st.integers(1, 2**64 - 1), st.binary(max_size=40)), max_size=5))
def test_exchange_requests_written_as_protobuf_reads_them(calls: list[tuple[int, bytes]]) -> None:
    parts: list[Any] = []
    for call_id, records in calls:
        body = append_request(1, 10, None, [PartitionAppend("t", 0, memoryview(records))])
        parts += exchange_entry_parts(call_id, EXCHANGE_APPEND, [body])
        parts += exchange_entry_parts(call_id, EXCHANGE_CANCEL, [])
    message = spb.ExchangeRequests.FromString(b"".join(parts))
    assert [(r.id, r.WhichOneof("call")) for r in message.requests] == [
        x for call_id, _ in calls for x in ((call_id, "append"), (call_id, "cancel"))
    ]
    appends = [r.append for r in message.requests if r.WhichOneof("call") == "append"]
    assert [a.partitions[0].records for a in appends] == [records for _, records in calls]


def test_exchange_responses_read_as_protobuf_writes_them() -> None:
    message = spb.ExchangeResponses()
    message.responses.add(id=7).append.partitions.add(topic="a", partition=1, base_offset=42)
    message.responses.add(id=8).fetch.partitions.add(
        topic="b", partition=2, high_watermark=9, records=b"batch-bytes"
    )
    message.responses.add(id=9).error.CopyFrom(spb.CallError(status_code=2, details="boom"))
    message.responses.add(id=10)  # a result this reader does not know: left out
    data = message.SerializeToString()
    parsed = parse_exchange_responses(data)
    assert [(i, k) for i, k, _ in parsed] == [
        (7, EXCHANGE_APPEND),
        (8, EXCHANGE_FETCH),
        (9, EXCHANGE_ERROR),
    ]
    append, fetch, error = (r for _, _, r in parsed)
    assert append.partitions[0].base_offset == 42  # type: ignore[attr-defined]
    result = fetch.partitions[0]  # type: ignore[attr-defined]
    assert (result.topic, result.partition, result.high_watermark) == ("b", 2, 9)
    assert isinstance(result.records, memoryview) and bytes(result.records) == b"batch-bytes"
    assert error == CallError(2, "boom")
