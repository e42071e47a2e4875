"""The `kafkapy` source's fast decoder (aiokafka's Cython record-batch reader into Arrow columns,
services/spark/fast_reader.py) against the project's own codec, record for record: batches
built by services/common/records with every compression codec, LogAppendTime, offset gaps
(compaction), empty batches, null keys/values/header values, ranges cut inside batches, and
transactions (control batches, aborted transactions under read_committed)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.records.record import (
    LOG_APPEND_TIME,
    Record,
    build_batch,
    build_end_txn_marker,
    iter_batch_records,
)
from services.spark.fast_reader import RecordColumns, _Aborted, _decode, aiokafka_settings
from services.spark.reader import arrow_schema

_BASE_TS = 1_700_000_000_000
_blob = st.none() | st.binary(max_size=40)
_record = st.tuples(
    _blob,
    _blob,
    st.lists(st.tuples(st.text(max_size=5), _blob), max_size=2),
    st.integers(0, 10_000),
    st.integers(1, 3),  # offset step: > 1 leaves a gap, as compaction does
)
_batch = st.tuples(
    st.lists(_record, max_size=12),
    st.sampled_from([0, 1, 2, 3, 4]),  # none, gzip, snappy, lz4, zstd
    st.booleans(),  # LogAppendTime
    st.integers(0, 2),  # offsets past the last record (an emptied batch's tail)
)


def _batches(spec: list[Any]) -> tuple[bytes, int]:
    """Fetch-response bytes of consecutive batches, and the offset after the last one."""
    out, offset = [], 0
    for recs, codec, log_append, tail in spec:
        records, at = [], offset
        for key, value, headers, ts, step in recs:
            records.append(Record(at, _BASE_TS + ts, key, value, list(headers)))
            at += step
        last = (at - 1 - offset if records else 0) + tail
        out.append(
            build_batch(
                records,
                base_offset=offset,
                compression=codec,
                timestamp_type=LOG_APPEND_TIME if log_append else 0,
                keep_offsets=True,
                last_offset_delta=last,
            )
        )
        offset += last + 1
    return b"".join(out), offset


def _rows(buf: bytes, start: int, until: int, include_headers: bool) -> tuple[list[dict], int]:
    cols = RecordColumns(include_headers)
    position = _decode(buf, _Aborted(None), start, until, cols)
    return cols.batch(arrow_schema(include_headers), "t", 3).to_pylist(), position


def _expected(buf: bytes, start: int, until: int, include_headers: bool) -> list[dict]:
    out = []
    for header, r in iter_batch_records(buf):
        if not start <= r.offset < until:
            continue
        row = {
            "key": r.key,
            "value": r.value,
            "topic": "t",
            "partition": 3,
            "offset": r.offset,
            "timestamp": dt.datetime.fromtimestamp(r.timestamp / 1000, dt.UTC),
            "timestampType": int(header.log_append_time),
        }
        if include_headers:
            row["headers"] = [{"key": k, "value": v} for k, v in r.headers] or None
        out.append(row)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(_batch, min_size=1, max_size=5), st.data(), st.booleans())
def test_decoder_matches_the_project_codec_record_for_record(
    spec: list[Any], data: st.DataObject, include_headers: bool
) -> None:
    buf, end = _batches(spec)
    start = data.draw(st.integers(0, end))
    until = data.draw(st.integers(start, end + 1))
    got, position = _rows(buf, start, until, include_headers)
    assert got == _expected(buf, start, until, include_headers)
    # the position moves past every batch read, emptied ones and compacted tails included
    assert position == max(start, min(end, until))


def _txn(records: list[bytes], offset: int, pid: int) -> bytes:
    return build_batch(
        [Record(offset + i, _BASE_TS, None, v) for i, v in enumerate(records)],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
        keep_offsets=True,
    )


def _marker(commit: bool, offset: int, pid: int) -> bytes:
    return build_end_txn_marker(
        commit,
        producer_id=pid,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp=_BASE_TS,
        base_offset=offset,
    )


def test_control_batches_and_aborted_transactions() -> None:
    """Producer 7 aborts offsets 0-1 and 5, producer 8 commits 2-3 around them; control batches
    (offsets 4, 6, 7) are never returned; read_committed leaves the aborted ones out using the
    response's aborted-transaction list."""
    buf = b"".join(
        [
            _txn([b"a0", b"a1"], 0, 7),
            _txn([b"c0", b"c1"], 2, 8),
            _marker(True, 4, 8),
            _txn([b"a2"], 5, 7),
            _marker(False, 6, 7),
            _marker(False, 7, 9),  # an abort marker of a producer with no records here
            build_batch([Record(8, _BASE_TS, None, b"n0")], base_offset=8, keep_offsets=True),
        ]
    )

    def values(aborted: list[tuple[int, int]] | None) -> tuple[list[bytes], int]:
        cols = RecordColumns(False)
        position = _decode(buf, _Aborted(aborted), 0, 9, cols)
        return cols.values, position  # type: ignore[return-value]

    assert values(None) == ([b"a0", b"a1", b"c0", b"c1", b"a2", b"n0"], 9)
    assert values([(7, 0)]) == ([b"c0", b"c1", b"n0"], 9)
    # the aborted list in any order; a producer aborted again after its marker
    assert values([(9, 7), (7, 0)]) == ([b"c0", b"c1", b"n0"], 9)


def test_settings_map_onto_aiokafka_or_fall_back_to_confluent() -> None:
    applied_here = {"isolation.level": "read_committed", "max.partition.fetch.bytes": "1000"}
    assert aiokafka_settings({"bootstrap.servers": "h:1", **applied_here}) == {
        "bootstrap_servers": "h:1"
    }
    sasl = aiokafka_settings(
        {"bootstrap.servers": "h:1", "security.protocol": "sasl_plaintext",
         "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": "p"}
    )  # fmt: skip
    assert sasl == {
        "bootstrap_servers": "h:1",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }
    tls = aiokafka_settings(
        {"bootstrap.servers": "h:1", "security.protocol": "SSL",
         "ssl.endpoint.identification.algorithm": "none"}
    )  # fmt: skip
    assert tls is not None and tls["ssl_context"].check_hostname is False
    # settings only librdkafka takes: the confluent-kafka reader
    assert aiokafka_settings({"bootstrap.servers": "h:1", "fetch.min.bytes": "1000"}) is None
    assert aiokafka_settings({"bootstrap.servers": "h:1", "ssl.ca.location": "x"}) is None


def test_a_truncated_response_tail_is_left_for_the_next_fetch() -> None:
    """A response cut inside its last batch (Fetch max bytes): the complete batches are read,
    the position stops before the cut one."""
    whole = build_batch([Record(0, _BASE_TS, None, b"v")]) + build_batch(
        [Record(1, _BASE_TS, None, b"w")], base_offset=1
    )
    rows, position = _rows(whole[:-3], 0, 5, False)
    assert [r["value"] for r in rows] == [b"v"] and position == 1
