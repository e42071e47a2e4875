"""The record-carrying Storage messages, written and read straight in protobuf's wire format.

Building ``PartitionAppend``/``AppendRequest`` messages copies every record batch twice (into
each message, then into the request) and ``SerializeToString`` a third time; reading a
``FetchResponse`` copies it once more to parse and again on each read of a ``records`` field.
Together these were the gateway's largest Python costs per byte. So ``append_request`` writes
``kafkapy.v1.AppendRequest`` (field numbers from storage.proto) with each record batch copied
once, from the client's frame into the request, and ``parse_fetch_response`` reads
``kafkapy.v1.FetchResponse`` into plain objects whose ``records`` are views of the received
bytes. The unit tests check both against the generated protobuf classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from services.common.protowire import Buffer, WireError, iter_fields, varint
from services.common.rpc.kafkapy.v1.storage_pb2 import AppendResponse

__all__ = ["WireError", "varint"]

# (field number << 3) | wire type; wire types: 0 varint, 2 length-delimited.
_ACKS = b"\x08"  # AppendRequest.acks = 1
_TIMEOUT = b"\x10"  # AppendRequest.timeout_ms = 2
_TXN_ID = b"\x1a"  # AppendRequest.transactional_id = 3
_PARTITION = b"\x22"  # AppendRequest.partitions = 4
_TOPIC = b"\x0a"  # PartitionAppend.topic = 1
_INDEX = b"\x10"  # PartitionAppend.partition = 2
_RECORDS = b"\x1a"  # PartitionAppend.records = 3
_EPOCH = b"\x20"  # PartitionAppend.current_leader_epoch = 4
_GUARD = b"\x28"  # PartitionAppend.verification_guard = 5


class PartitionAppend(NamedTuple):
    """One partition of an Append: its record batches stay a view of the client's frame."""

    topic: str
    partition: int
    records: Buffer
    current_leader_epoch: int = -1
    verification_guard: int = 0  # KIP-890: see storage.proto


def _int_field(tag: bytes, value: int) -> bytes:
    return tag + varint(value) if value else b""  # proto3 leaves zero out


def append_request(
    acks: int, timeout_ms: int, transactional_id: str | None, partitions: Sequence[PartitionAppend]
) -> bytes:
    """The serialized ``AppendRequest``."""
    return b"".join(append_request_parts(acks, timeout_ms, transactional_id, partitions))


def append_request_parts(
    acks: int, timeout_ms: int, transactional_id: str | None, partitions: Sequence[PartitionAppend]
) -> list[Buffer]:
    """The serialized ``AppendRequest`` as buffers (record batches are not copied)."""
    out: list[Buffer] = [_int_field(_ACKS, acks), _int_field(_TIMEOUT, timeout_ms)]
    if transactional_id:
        raw = transactional_id.encode()
        out += (_TXN_ID, varint(len(raw)), raw)
    topics: dict[str, bytes] = {}
    for p in partitions:
        topic = topics.get(p.topic)
        if topic is None:
            raw = p.topic.encode()
            topic = topics[p.topic] = (_TOPIC + varint(len(raw)) + raw) if raw else b""
        n = len(p.records)
        head = topic + _int_field(_INDEX, p.partition) + ((_RECORDS + varint(n)) if n else b"")
        tail = _int_field(_EPOCH, p.current_leader_epoch) + _int_field(_GUARD, p.verification_guard)
        out += (_PARTITION, varint(len(head) + n + len(tail)), head, p.records, tail)
    return out


# ---- FetchResponse --------------------------------------------------------------------------
class AbortedTransaction(NamedTuple):
    producer_id: int = 0
    first_offset: int = 0


class PartitionFetchResult:
    """``kafkapy.v1.PartitionFetchResult`` with ``records`` a view of the response bytes."""

    __slots__ = (
        "topic",
        "partition",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "records",
        "aborted_transactions",
        "log_end_offset",
    )

    def __init__(self) -> None:
        self.topic = ""
        self.partition = 0
        self.error_code = 0
        self.high_watermark = 0
        self.last_stable_offset = 0
        self.log_start_offset = 0
        self.records: Buffer = b""
        self.aborted_transactions: list[AbortedTransaction] = []
        self.log_end_offset = 0


class FetchResponse(NamedTuple):
    partitions: list[PartitionFetchResult]
    error_code: int = 0  # a fetch session's error (KIP-227)
    session_id: int = 0


# PartitionFetchResult varint fields by number (2 partition ... 9 log_end_offset).
_RESULT_INTS = {
    2: "partition",
    3: "error_code",
    4: "high_watermark",
    5: "last_stable_offset",
    6: "log_start_offset",
    9: "log_end_offset",
}


def _fetch_result(buf: bytes, view: memoryview, pos: int, end: int) -> PartitionFetchResult:
    r = PartitionFetchResult()
    for number, value, start, stop in iter_fields(buf, pos, end):
        if value is not None:
            if number in _RESULT_INTS:
                setattr(r, _RESULT_INTS[number], value)
        elif number == 1:
            r.topic = str(view[start:stop], "utf-8")
        elif number == 7:
            r.records = view[start:stop]
        elif number == 8:
            ids = {1: 0, 2: 0}
            for n, v, _, _ in iter_fields(buf, start, stop):
                if n in ids and v is not None:
                    ids[n] = v
            r.aborted_transactions.append(AbortedTransaction(ids[1], ids[2]))
    return r


def parse_fetch_response(data: bytes, begin: int = 0, end: int | None = None) -> FetchResponse:
    """A serialized ``FetchResponse`` (``data[begin:end]``); ``records`` are memoryviews of
    ``data``."""
    view = memoryview(data)
    results: list[PartitionFetchResult] = []
    error_code = session_id = 0
    for number, value, start, stop in iter_fields(data, begin, len(data) if end is None else end):
        if number == 1 and value is None:
            results.append(_fetch_result(data, view, start, stop))
        elif number == 2 and value is not None:
            error_code = value
        elif number == 3 and value is not None:
            session_id = value
    return FetchResponse(results, error_code, session_id)


# ---- Exchange (storage.proto: ExchangeRequests / ExchangeResponses) -------------------------
# The field numbers of the calls in ExchangeRequest.call and of the results in
# ExchangeResponse.result.
EXCHANGE_APPEND = 2
EXCHANGE_FETCH = 3
EXCHANGE_CANCEL = 4
EXCHANGE_ERROR = 4


def exchange_entry_parts(call_id: int, kind: int, parts: Sequence[Buffer]) -> list[Buffer]:
    """One ``ExchangeRequest`` or ``ExchangeResponse`` (an element of the ``repeated`` field 1
    of ``ExchangeRequests``/``ExchangeResponses``) whose field ``kind`` holds the message
    serialized as ``parts``; the parts are not copied."""
    size = sum(map(len, parts))
    ident = (b"\x08" + varint(call_id)) if call_id else b""  # id = 1
    body_head = bytes((kind << 3 | 2,)) + varint(size)
    return [b"\x0a", varint(len(ident) + len(body_head) + size), ident, body_head, *parts]


class CallError(NamedTuple):
    status_code: int
    details: str


def _call_error(buf: bytes, view: memoryview, pos: int, end: int) -> CallError:
    code, details = 0, ""
    for number, value, start, stop in iter_fields(buf, pos, end):
        if number == 1 and value is not None:
            code = value
        elif number == 2 and value is None:
            details = str(view[start:stop], "utf-8", "replace")
    return CallError(code, details)


ExchangeResult = tuple[int, int, object]  # (id, EXCHANGE_APPEND | _FETCH | _ERROR, result)


def parse_exchange_responses(data: bytes) -> list[ExchangeResult]:
    """A serialized ``ExchangeResponses``: Append results as ``storage_pb2.AppendResponse``,
    Fetch results as ``FetchResponse`` (records are views of ``data``), errors as
    ``CallError``. Results of unknown kinds are left out."""
    view = memoryview(data)
    out: list[ExchangeResult] = []
    for number, value, start, stop in iter_fields(data, 0, len(data)):
        if number != 1 or value is not None:
            continue
        call_id = 0
        result: tuple[int, object] | None = None
        for n, v, s, e in iter_fields(data, start, stop):
            if n == 1 and v is not None:
                call_id = v % (1 << 64)  # uint64
            elif v is None and n == EXCHANGE_APPEND:
                result = (n, AppendResponse.FromString(view[s:e]))  # type: ignore[arg-type]
            elif v is None and n == EXCHANGE_FETCH:
                result = (n, parse_fetch_response(data, s, e))
            elif v is None and n == EXCHANGE_ERROR:
                result = (n, _call_error(data, view, s, e))
        if result is not None:
            out.append((call_id, *result))
    return out
