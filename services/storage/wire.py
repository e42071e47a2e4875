"""The record-carrying Storage messages, read and written straight in protobuf's wire format.

``pb.FetchResponse`` would copy every record set three times (into the message, the response
and ``SerializeToString``). ``FetchResult``s keep the log's bytes (or views of them) and
``fetch_response_bytes`` writes ``kafkapy.v1.FetchResponse`` (field numbers from
storage.proto) with each record set copied once; clients parse it as any FetchResponse.
``parse_append_request`` reads ``kafkapy.v1.AppendRequest`` with each record set copied once,
into the bytearray the log assigns offsets in (``FromString``, ``.records`` and ``bytearray()``
made three copies).
"""

from __future__ import annotations

from typing import Any

from services.common.protowire import (
    LENGTH_DELIMITED,
    Buffer,
    WireError,
    int_field,
    iter_fields,
    tag,
    varint,
)
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.storage_wire import (
    EXCHANGE_APPEND,
    EXCHANGE_CANCEL,
    EXCHANGE_ERROR,
    EXCHANGE_FETCH,
)

__all__ = ["WireError"]


class FetchResult:
    """The fields of ``pb.PartitionFetchResult`` (``records`` may be a view)."""

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

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.error_code = 0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.records: Buffer = b""
        self.aborted_transactions: list[Any] = []  # objects with producer_id, first_offset
        self.log_end_offset = 0


class FetchReply:
    """What Storage.Fetch answers; serialized by ``fetch_response_bytes``."""

    __slots__ = ("partitions", "error_code", "session_id")

    def __init__(
        self, partitions: list[FetchResult], error_code: int = 0, session_id: int = 0
    ) -> None:
        self.partitions = partitions
        self.error_code = error_code  # a fetch session's error (KIP-227)
        self.session_id = session_id


def _result(r: FetchResult, out: list[Buffer]) -> None:
    topic = r.topic.encode()
    head = [
        tag(1, LENGTH_DELIMITED) + varint(len(topic)) + topic if topic else b"",
        int_field(2, r.partition),
        int_field(3, r.error_code),
        int_field(4, r.high_watermark),
        int_field(5, r.last_stable_offset),
        int_field(6, r.log_start_offset),
    ]
    n = len(r.records)
    if n:
        head.append(tag(7, LENGTH_DELIMITED) + varint(n))
    tail = []
    for a in r.aborted_transactions:
        body = int_field(1, a.producer_id) + int_field(2, a.first_offset)
        tail.append(tag(8, LENGTH_DELIMITED) + varint(len(body)) + body)
    tail.append(int_field(9, r.log_end_offset))
    head_b, tail_b = b"".join(head), b"".join(tail)
    out += (
        tag(1, LENGTH_DELIMITED),
        varint(len(head_b) + n + len(tail_b)),
        head_b,
        r.records,
        tail_b,
    )


def fetch_response_parts(reply: FetchReply | Any) -> list[Buffer]:
    """The serialized FetchResponse as buffers (a protobuf message is serialized as usual)."""
    if not isinstance(reply, FetchReply):
        return [reply.SerializeToString()]
    out: list[Buffer] = []
    for r in reply.partitions:
        _result(r, out)
    if reply.error_code or reply.session_id:
        out.append(int_field(2, reply.error_code) + int_field(3, reply.session_id))
    return out


def fetch_response_bytes(reply: FetchReply | Any) -> bytes:
    """The serialized FetchResponse."""
    return b"".join(fetch_response_parts(reply))


# ---- AppendRequest --------------------------------------------------------------------------
class AppendPartition:
    """``pb.PartitionAppend`` with ``records`` a private bytearray (offsets are set in place)."""

    __slots__ = ("topic", "partition", "records", "current_leader_epoch", "verification_guard")

    def __init__(self) -> None:
        self.topic = ""
        self.partition = 0
        self.records = bytearray()
        self.current_leader_epoch = 0
        self.verification_guard = 0


class AppendCall:
    """``pb.AppendRequest`` as read by ``parse_append_request``."""

    __slots__ = ("acks", "timeout_ms", "transactional_id", "partitions")

    def __init__(self) -> None:
        self.acks = 0
        self.timeout_ms = 0
        self.transactional_id = ""
        self.partitions: list[AppendPartition] = []


def parse_append_request(data: Buffer, begin: int = 0, end: int | None = None) -> AppendCall:
    """A serialized AppendRequest (``data[begin:end]``); each partition's records copied once,
    into a bytearray."""
    view = memoryview(data)
    call = AppendCall()
    for number, value, start, stop in iter_fields(data, begin, len(data) if end is None else end):
        if value is not None:
            if number == 1:
                call.acks = value
            elif number == 2:
                call.timeout_ms = value
        elif number == 3:
            call.transactional_id = str(view[start:stop], "utf-8")
        elif number == 4:
            p = AppendPartition()
            for n, v, s, e in iter_fields(data, start, stop):
                if v is not None:
                    if n == 2:
                        p.partition = v
                    elif n == 4:
                        p.current_leader_epoch = v
                    elif n == 5:
                        p.verification_guard = v
                elif n == 1:
                    p.topic = str(view[s:e], "utf-8")
                elif n == 3:
                    p.records = bytearray(view[s:e])
            call.partitions.append(p)
    return call


# ---- Exchange -------------------------------------------------------------------------------
APPEND = EXCHANGE_APPEND
FETCH = EXCHANGE_FETCH
CANCEL = EXCHANGE_CANCEL
ERROR = EXCHANGE_ERROR

ExchangeCall = tuple[int, int, Any]  # (id, APPEND | FETCH | CANCEL, parsed request or None)


def parse_exchange_requests(data: bytes) -> list[ExchangeCall]:
    """A serialized ``ExchangeRequests``: Append requests as ``AppendCall`` (records copied
    once), Fetch requests as ``pb.FetchRequest``, cancels with None. Unknown calls are
    returned with kind 0 so they can be answered with an error."""
    view = memoryview(data)
    calls: list[ExchangeCall] = []
    for number, value, start, stop in iter_fields(data, 0, len(data)):
        if number != 1 or value is not None:
            continue
        call_id, kind = 0, 0
        body: Any = None
        for n, v, s, e in iter_fields(data, start, stop):
            if n == 1 and v is not None:
                call_id = v % (1 << 64)  # uint64
            elif v is None and n == APPEND:
                kind, body = APPEND, parse_append_request(data, s, e)
            elif v is None and n == FETCH:
                # protobuf parses any buffer; its stubs only name bytes (no copy wanted here)
                kind, body = FETCH, pb.FetchRequest.FromString(view[s:e])  # type: ignore[arg-type]
            elif v is None and n == CANCEL:
                kind, body = CANCEL, None
        calls.append((call_id, kind, body))
    return calls


def call_error_parts(status_code: int, details: str) -> list[Buffer]:
    """A serialized ``CallError``."""
    raw = details.encode()
    text = tag(2, LENGTH_DELIMITED) + varint(len(raw)) + raw if raw else b""
    return [int_field(1, status_code) + text]
