"""storage.wire: hand-written FetchResponse / hand-read AppendRequest agree with protobuf."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.common.protowire import Buffer
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.storage_wire import exchange_entry_parts
from services.storage.wire import (
    APPEND,
    CANCEL,
    ERROR,
    FETCH,
    FetchReply,
    FetchResult,
    call_error_parts,
    fetch_response_bytes,
    parse_append_request,
    parse_exchange_requests,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _result(
    topic: str,
    partition: int,
    code: int,
    hw: int,
    lso: int,
    start: int,
    records: bytes,
    aborted: list[tuple[int, int]],
    leo: int,
) -> FetchResult:
    r = FetchResult(topic, partition)
    r.error_code, r.high_watermark, r.last_stable_offset = code, hw, lso
    r.log_start_offset, r.records, r.log_end_offset = start, memoryview(records), leo
    r.aborted_transactions = [
        pb.AbortedTransaction(producer_id=a, first_offset=b) for a, b in aborted
    ]
    return r


RESULTS = st.builds(
    _result,
    st.text(max_size=20),
    INT32,
    INT32,
    INT64,
    INT64,
    INT64,
    st.binary(max_size=300),
    st.lists(st.tuples(INT64, INT64), max_size=3),
    INT64,
)


@given(results=st.lists(RESULTS, max_size=5))
def test_fetch_response_is_protobufs_own(results: list[FetchResult]) -> None:
    expected = pb.FetchResponse(
        partitions=[
            pb.PartitionFetchResult(
                topic=r.topic,
                partition=r.partition,
                error_code=r.error_code,
                high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset,
                log_start_offset=r.log_start_offset,
                records=bytes(r.records),
                aborted_transactions=r.aborted_transactions,
                log_end_offset=r.log_end_offset,
            )
            for r in results
        ]
    )
    assert fetch_response_bytes(FetchReply(results)) == expected.SerializeToString()
    assert fetch_response_bytes(expected) == expected.SerializeToString()


@given(
    acks=st.sampled_from([-1, 0, 1]),
    timeout=INT32,
    txn=st.text(max_size=10),
    parts=st.lists(
        st.tuples(st.text(max_size=20), INT32, st.binary(max_size=300), INT32), max_size=5
    ),
)
def test_append_request_reads_like_protobuf(
    acks: int, timeout: int, txn: str, parts: list[tuple[str, int, bytes, int]]
) -> None:
    msg = pb.AppendRequest(
        acks=acks,
        timeout_ms=timeout,
        transactional_id=txn,
        partitions=[
            pb.PartitionAppend(topic=t, partition=p, records=r, current_leader_epoch=e)
            for t, p, r, e in parts
        ],
    )
    call = parse_append_request(msg.SerializeToString())
    assert (call.acks, call.timeout_ms, call.transactional_id) == (acks, timeout, txn)
    assert all(p.verification_guard == 0 for p in call.partitions)
    assert [
        (p.topic, p.partition, bytes(p.records), p.current_leader_epoch) for p in call.partitions
    ] == parts
    assert all(isinstance(p.records, bytearray) for p in call.partitions)


def test_append_request_carries_the_verification_guard() -> None:
    """KIP-890: the guard storage handed out comes back on the resent partition."""
    part = pb.PartitionAppend(topic="t", partition=1, records=b"x", verification_guard=2**62)
    call = parse_append_request(pb.AppendRequest(partitions=[part]).SerializeToString())
    assert [p.verification_guard for p in call.partitions] == [2**62]


# ---- Exchange ---------------------------------------------------------------------------------
APPEND_REQUESTS = st.builds(
    lambda acks, timeout, parts: pb.AppendRequest(
        acks=acks,
        timeout_ms=timeout,
        partitions=[
            pb.PartitionAppend(topic=t, partition=p, records=r, current_leader_epoch=e)
            for t, p, r, e in parts
        ],
    ),
    st.sampled_from([-1, 0, 1]),
    st.integers(0, 2**31 - 1),
    st.lists(st.tuples(st.text(max_size=8), INT32, st.binary(max_size=64), INT32), max_size=3),
)


@given(
    st.lists(
        st.tuples(
            st.integers(1, 2**64 - 1),
            st.one_of(APPEND_REQUESTS, st.builds(pb.FetchRequest, max_wait_ms=INT32), st.none()),
        ),
        max_size=5,
    )
)
def test_exchange_requests_read_as_protobuf_writes_them(calls: list[tuple[int, object]]) -> None:
    message = pb.ExchangeRequests()
    for call_id, body in calls:
        entry = message.requests.add(id=call_id)
        if isinstance(body, pb.AppendRequest):
            entry.append.CopyFrom(body)
        elif isinstance(body, pb.FetchRequest):
            entry.fetch.CopyFrom(body)
        else:
            entry.cancel.SetInParent()
    parsed = parse_exchange_requests(message.SerializeToString())
    assert [c[0] for c in parsed] == [c[0] for c in calls]
    for (_, kind, got), (_, body) in zip(parsed, calls, strict=True):
        if isinstance(body, pb.AppendRequest):
            assert kind == APPEND
            assert got.acks == body.acks and got.timeout_ms == body.timeout_ms
            assert [
                (p.topic, p.partition, bytes(p.records), p.current_leader_epoch)
                for p in got.partitions
            ] == [
                (p.topic, p.partition, p.records, p.current_leader_epoch) for p in body.partitions
            ]
        elif isinstance(body, pb.FetchRequest):
            assert kind == FETCH and got == body
        else:
            assert kind == CANCEL and got is None


@given(st.lists(st.tuples(st.integers(1, 2**64 - 1), INT32, st.text(max_size=20)), max_size=4))
def test_exchange_responses_written_as_protobuf_reads_them(
    answers: list[tuple[int, int, str]],
) -> None:
    parts: list[Buffer] = []
    for call_id, code, details in answers:
        if code % 2:
            parts += exchange_entry_parts(call_id, ERROR, call_error_parts(code, details))
        else:
            body = pb.AppendResponse(
                partitions=[
                    pb.PartitionAppendResult(topic=details, partition=code, base_offset=code)
                ]
            ).SerializeToString()
            parts += exchange_entry_parts(call_id, APPEND, [body])
    message = pb.ExchangeResponses.FromString(b"".join(parts))
    assert [r.id for r in message.responses] == [a[0] for a in answers]
    for r, (_, code, details) in zip(message.responses, answers, strict=True):
        if code % 2:
            assert r.WhichOneof("result") == "error"
            assert (r.error.status_code, r.error.details) == (code, details)
        else:
            assert r.append.partitions[0].topic == details
            assert r.append.partitions[0].base_offset == code
