"""`kafka-py dump-log` on segments written the way Kafka writes them."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.cli.dump_log import (
    DumpError,
    DumpResult,
    dump_offset_index,
    dump_segment,
    dump_time_index,
    main,
)
from services.common.records.batch import parse_header, set_log_append_time
from services.common.records.compression import Codec
from services.common.records.record import Record, build_batch, build_end_txn_marker

T0 = 1_700_000_000_000
INTERVAL = 300  # index.interval.bytes, small so that a few batches get indexed


@dataclass
class Segment:
    base: int
    log: bytearray = field(default_factory=bytearray)
    index: bytearray = field(default_factory=bytearray)
    time_index: bytearray = field(default_factory=bytearray)
    since_index: int = 0
    max_ts: tuple[int, int] = (-1, -1)  # (timestamp, offset) of the largest timestamp so far

    def append(self, batch: bytes) -> None:
        """LogSegment.append for one batch, including its sparse index entries."""
        header = parse_header(batch)
        if header.max_timestamp > self.max_ts[0]:
            self.max_ts = (header.max_timestamp, header.last_offset)
        if self.since_index > INTERVAL:
            self.index += struct.pack(">ii", header.last_offset - self.base, len(self.log))
            ts, offset = self.max_ts
            last_ts = struct.unpack_from(">q", self.time_index, -12)[0] if self.time_index else -1
            if ts > last_ts:  # TimeIndex.maybeAppend
                self.time_index += struct.pack(">qi", ts, offset - self.base)
            self.since_index = 0
        self.log += batch
        self.since_index += len(batch)

    def write(self, directory: Path, *, preallocated: int = 0) -> Path:
        name = directory / f"{self.base:020d}"
        name.with_suffix(".log").write_bytes(bytes(self.log))
        name.with_suffix(".index").write_bytes(bytes(self.index) + b"\0" * 8 * preallocated)
        name.with_suffix(".timeindex").write_bytes(
            bytes(self.time_index) + b"\0" * 12 * preallocated
        )
        return name.with_suffix(".log")


def data_batch(base_offset: int, n: int, codec: int = 0, **kwargs: int) -> bytes:
    records = [
        Record(
            timestamp=T0 + base_offset + i,
            key=f"k-{base_offset + i}".encode(),
            value=b"hello" if i % 2 == 0 else b"hello " * 20,
            headers=[("h1", b"x")] if i % 2 == 0 else [],
        )
        for i in range(n)
    ]
    return build_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=kwargs.get("producer_id", 1000),
        producer_epoch=0,
        base_sequence=base_offset,
        partition_leader_epoch=0,
    )


def make_segment(base: int = 0, batches: int = 8) -> Segment:
    seg = Segment(base)
    offset = base
    for i in range(batches):
        seg.append(data_batch(offset, 10, codec=i % 5))
        offset += 10
    seg.append(
        build_end_txn_marker(
            True,
            producer_id=1000,
            producer_epoch=0,
            coordinator_epoch=4,
            timestamp=T0 + 80,
            base_offset=offset,
            partition_leader_epoch=0,
        )
    )
    return seg


def run(path: Path, **kwargs: bool) -> tuple[DumpResult, str, str]:
    out, err = io.StringIO(), io.StringIO()
    result = dump_segment(path, out=out, err=err, **{"print_records": False, **kwargs})
    return result, out.getvalue(), err.getvalue()


def test_clean_segment(tmp_path: Path) -> None:
    seg = make_segment()
    path = seg.write(tmp_path)
    result, out, err = run(path, print_records=True)
    assert err == ""
    assert result.clean
    assert (result.batches, result.records, result.invalid_batches) == (9, 81, 0)
    assert result.index_entries == len(seg.index) // 8 > 3
    assert result.time_index_entries == result.index_entries
    assert result.valid_bytes == len(seg.log) and result.trailing_bytes == 0
    lines = out.splitlines()
    assert lines[0] == "Log starting offset: 0"
    first = parse_header(bytes(seg.log))
    assert lines[1] == (
        "baseOffset: 0 lastOffset: 9 count: 10 baseSequence: 0 lastSequence: 9 "
        "producerId: 1000 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 "
        f"CreateTime: {T0 + 9} size: {first.size} magic: 2 compresscodec: none "
        f"crc: {first.crc} isvalid: true"
    )
    assert lines[2] == (
        f"| offset: 0 CreateTime: {T0} keySize: 3 valueSize: 5 sequence: 0 "
        "headerKeys: [h1] key: k-0 payload: hello"
    )
    assert lines[3].startswith(f"| offset: 1 CreateTime: {T0 + 1} keySize: 3 valueSize: 120 ")
    assert " headerKeys: [] key: k-1 payload: hello hello " in lines[3]
    codecs = [line.split("compresscodec: ")[1].split()[0] for line in lines if "baseOffset" in line]
    assert codecs == ["none", "gzip", "snappy", "lz4", "zstd", "none", "gzip", "snappy", "none"]
    assert lines[-2].startswith("baseOffset: 80 lastOffset: 80 count: 1 baseSequence: -1 ")
    assert "isTransactional: true isControl: true" in lines[-2]
    assert lines[-1] == (
        f"| offset: 80 CreateTime: {T0 + 80} keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 4"
    )


def test_positions_follow_batch_sizes(tmp_path: Path) -> None:
    seg = make_segment()
    _, out, _ = run(seg.write(tmp_path))
    positions = [int(line.split("position: ")[1].split()[0]) for line in out.splitlines()[1:]]
    sizes = [int(line.split("size: ")[1].split()[0]) for line in out.splitlines()[1:]]
    assert positions == [sum(sizes[:i]) for i in range(len(sizes))]


def test_shallow_and_deep_iteration(tmp_path: Path) -> None:
    path = make_segment(batches=2).write(tmp_path)
    result, out, _ = run(path)
    assert result.records == 0 and "| offset" not in out
    result, out, _ = run(path, deep_iteration=True)
    assert result.records == 21
    assert "| offset: 0 " in out and "payload" not in out
    _, out, _ = run(path, print_records=True, skip_record_metadata=True)
    assert "| key: k-0 payload: hello\n" in out and "keySize" not in out


def test_null_key_and_value_and_log_append_time(tmp_path: Path) -> None:
    batch = bytearray(build_batch([Record(timestamp=T0), Record(timestamp=T0 + 1, value=b"v")]))
    set_log_append_time(batch, 0, len(batch), T0 + 500)
    seg = Segment(0)
    seg.append(bytes(batch))
    _, out, _ = run(seg.write(tmp_path), print_records=True)
    lines = out.splitlines()
    assert f"position: 0 LogAppendTime: {T0 + 500} " in lines[1]
    assert lines[2] == (
        f"| offset: 0 LogAppendTime: {T0 + 500} keySize: -1 valueSize: -1 sequence: -1 "
        "headerKeys: []"
    )
    assert lines[3].endswith("valueSize: 1 sequence: -1 headerKeys: [] payload: v")


def test_torn_tail(tmp_path: Path) -> None:
    seg = make_segment()
    last_batch = data_batch(81, 10)
    seg.since_index = INTERVAL + 1  # make the torn batch an indexed one
    seg.append(last_batch)
    torn = len(last_batch) - 7
    path = seg.write(tmp_path)
    path.write_bytes(bytes(seg.log[:-7]))
    result, out, err = run(path)
    assert result.batches == 9 and result.trailing_bytes == torn
    assert out.splitlines()[-1] == f"Found {torn} invalid bytes at the end of {path.name}"
    assert not result.clean
    # The index entry for the torn batch now points past the log's last complete batch.
    assert result.index_errors == 2  # offset index + time index
    assert "which is past the last complete batch" in err
    assert "The following indexed offsets are not found in the log." in err
    assert "Indexed offset: 90, found log offset: -1" in err


def test_zero_filled_tail(tmp_path: Path) -> None:
    seg = make_segment(batches=2)
    path = seg.write(tmp_path)
    path.write_bytes(bytes(seg.log) + b"\0" * 40)
    result, out, err = run(path)
    assert result.batches == 3 and result.trailing_bytes == 40
    assert f"Found 40 invalid bytes at the end of {path.name}" in out
    assert "invalid length 0" in err


def test_crc_mismatch(tmp_path: Path) -> None:
    seg = make_segment(batches=3)
    second = parse_header(bytes(seg.log), parse_header(bytes(seg.log)).size)
    seg.log[second.position + second.size - 3] ^= 0x01  # a byte of the gzip trailer
    result, out, err = run(seg.write(tmp_path), print_records=True)
    assert result.invalid_batches == 1
    lines = [line for line in out.splitlines() if line.startswith("baseOffset")]
    assert lines[1].endswith("isvalid: false")
    assert all(line.endswith("isvalid: true") for line in lines[:1] + lines[2:])


def test_undecodable_records_are_reported(tmp_path: Path) -> None:
    seg = Segment(0)
    batch = bytearray(data_batch(0, 5, codec=Codec.GZIP))
    batch[61 + 30] ^= 0xFF  # break the deflate data inside the gzip stream
    seg.append(bytes(batch))
    result, out, err = run(seg.write(tmp_path), print_records=True)
    assert result.invalid_batches == 1 and result.batches == 1
    assert "isvalid: false" in out
    assert "Cannot decode the records of the batch at position 0" in err


def test_offset_index_mismatch(tmp_path: Path) -> None:
    seg = make_segment()
    relative, position = struct.unpack_from(">ii", seg.index, 0)
    struct.pack_into(">ii", seg.index, 0, relative - 9, position)  # the batch's first offset
    result, _, err = run(seg.write(tmp_path))
    assert result.index_errors == 1
    lines = err.splitlines()
    assert lines[0] == f"Mismatches in :{(tmp_path / '00000000000000000000.index').absolute()}"
    assert lines[1] == f"  Index offset: {relative - 9}, log offset: {relative}"


def test_offset_index_entry_inside_a_batch(tmp_path: Path) -> None:
    seg = make_segment()
    relative, position = struct.unpack_from(">ii", seg.index, 8)
    struct.pack_into(">ii", seg.index, 8, relative, position + 5)
    result, _, err = run(seg.write(tmp_path))
    assert result.index_errors == 1
    assert f"points to position {position + 5}, which is not at the start of a batch" in err


def test_offset_index_out_of_order(tmp_path: Path) -> None:
    seg = make_segment()
    first, second = bytes(seg.index[0:8]), bytes(seg.index[8:16])
    seg.index[0:16] = second + first
    result, _, err = run(seg.write(tmp_path))
    assert result.index_errors == 1
    assert "does not follow the previous entry" in err


def test_preallocated_index_tails_are_ignored(tmp_path: Path) -> None:
    seg = make_segment()
    result, _, err = run(seg.write(tmp_path, preallocated=50))
    assert err == "" and result.clean
    assert result.index_entries == len(seg.index) // 8


def test_time_index_problems(tmp_path: Path) -> None:
    seg = make_segment()
    ts0, rel0 = struct.unpack_from(">qi", seg.time_index, 0)
    ts1, _ = struct.unpack_from(">qi", seg.time_index, 12)
    struct.pack_into(">qi", seg.time_index, 0, ts0 + 1000, rel0)  # wrong, and out of order
    struct.pack_into(">qi", seg.time_index, 24, T0, 3)  # offset 3 is no batch's last offset
    result, _, err = run(seg.write(tmp_path))
    path = (tmp_path / "00000000000000000000.timeindex").absolute()
    lines = err.splitlines()
    assert lines[lines.index(f"Found timestamp mismatch in :{path}") + 1] == (
        f"  Index timestamp: {ts0 + 1000}, log timestamp: {ts0}"
    )
    assert lines[lines.index(f"Found out of order timestamp in :{path}") + 1] == (
        f"  Index timestamp: {ts1}, Previously indexed timestamp: {ts0 + 1000}"
    )
    assert "Indexed offset: 3, found log offset: 9" in err
    assert result.index_errors == 3


def test_segment_with_base_offset_and_gaps(tmp_path: Path) -> None:
    seg = Segment(100)
    seg.append(data_batch(100, 5))
    seg.append(data_batch(110, 5))  # offsets 105..109 were compacted away
    result, out, err = run(seg.write(tmp_path), deep_iteration=True)
    assert out.startswith("Log starting offset: 100\n")
    assert result.non_consecutive_offsets == 1
    assert err.splitlines()[1:] == ["  104 is followed by 110"]
    assert err.splitlines()[0].startswith("Non-consecutive offsets in ")


def test_listing_indexes(tmp_path: Path) -> None:
    seg = make_segment()
    path = seg.write(tmp_path, preallocated=3)
    out = io.StringIO()
    result = dump_offset_index(path.with_suffix(".index"), out=out, err=out)
    expected = [
        f"offset: {rel} position: {pos}" for rel, pos in struct.iter_unpack(">ii", bytes(seg.index))
    ]
    assert out.getvalue().splitlines() == expected and result.index_errors == 0
    out = io.StringIO()
    dump_time_index(path.with_suffix(".timeindex"), out=out, err=out)
    assert out.getvalue().splitlines() == [
        f"timestamp: {ts} offset: {rel}"
        for ts, rel in struct.iter_unpack(">qi", bytes(seg.time_index))
    ]
    out = io.StringIO()
    dump_offset_index(path.with_suffix(".index"), out=out, verify_only=True)
    assert out.getvalue() == ""


def test_sanity_check(tmp_path: Path) -> None:
    path = make_segment().write(tmp_path, preallocated=2)
    out = io.StringIO()
    assert dump_offset_index(path.with_suffix(".index"), out=out, sanity_only=True).clean
    assert out.getvalue() == f"{path.with_suffix('.index')} passed sanity check.\n"
    out = io.StringIO()
    result = dump_time_index(path.with_suffix(".timeindex"), out=out, sanity_only=True)
    assert result.index_errors == 1  # a never-trimmed time index fails, as in Kafka
    assert (
        "has non-zero size but the last timestamp is 0 which is less than the first"
        in out.getvalue()
    )
    path.with_suffix(".index").write_bytes(b"\0" * 9)
    out = io.StringIO()
    assert dump_offset_index(path.with_suffix(".index"), out=out, sanity_only=True).index_errors
    assert "found 9 bytes which is neither positive nor a multiple of 8" in out.getvalue()


def test_unreadable_and_badly_named_files(tmp_path: Path) -> None:
    with pytest.raises(DumpError, match="cannot read"):
        dump_segment(tmp_path / "00000000000000000000.log", print_records=False, out=io.StringIO())
    (tmp_path / "segment.log").write_bytes(b"")
    with pytest.raises(DumpError, match="not a segment file name"):
        dump_segment(tmp_path / "segment.log", print_records=False, out=io.StringIO())


def test_empty_segment(tmp_path: Path) -> None:
    path = Segment(0).write(tmp_path)
    result, out, err = run(path)
    assert out == "Log starting offset: 0\n" and err == ""
    assert result == DumpResult()


# --------------------------------------------------------------------------- main()


def test_main_dumps_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = make_segment().write(tmp_path)
    index = path.with_suffix(".index")
    assert main(["--files", f"{path},{index}", "--print-data-log"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    out = captured.out.splitlines()
    assert out[0] == f"Dumping {path}" and out[1] == "Log starting offset: 0"
    assert "| offset: 0 CreateTime" in captured.out and "payload: hello" in captured.out
    assert f"Dumping {index}" in out
    assert out[-1].startswith("offset: ") and " position: " in out[-1]


def test_main_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = make_segment(batches=1).write(tmp_path)
    missing = tmp_path / "00000000000000000500.log"
    assert main(["--files", str(missing), str(good)]) == 1
    captured = capsys.readouterr()
    errors = captured.err.splitlines()
    assert len(errors) == 1
    assert errors[0].startswith(f"dump-log: error: cannot read {missing}: ")
    assert "No such file" in errors[0]
    assert "baseOffset: 0 lastOffset: 9" in captured.out  # the other file was still dumped


def test_main_sanity_check_and_unknown_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_segment().write(tmp_path, preallocated=1)
    other = tmp_path / "notes.txt"
    other.write_text("x")
    argv = ["--files", str(path.with_suffix(".timeindex")), str(other), "--index-sanity-check"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Corrupt time index found" in err and f"Ignoring unknown file {other}" in err
    assert main(["--files", str(path.with_suffix(".index")), "--index-sanity-check"]) == 0


def test_main_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "--files" in capsys.readouterr().err
    assert main(["--help"]) == 0


def test_offsets_decoder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from services.common.internal_topics.consumer_offsets import (
        OffsetAndMetadata,
        group_metadata_key,
        offset_commit_key,
        offset_commit_value,
    )

    batch = build_batch(
        [
            Record(
                key=offset_commit_key("g", "t", 0), value=offset_commit_value(OffsetAndMetadata(5))
            ),
            Record(key=group_metadata_key("g"), value=None),
            Record(key=b"not an offsets key", value=b"x"),
        ]
    )
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch)
    assert main(["--files", str(path), "--offsets-decoder"]) == 0  # implies --print-data-log
    out = capsys.readouterr().out.splitlines()
    records = [line for line in out if line.startswith("| offset:")]
    assert len(records) == 3
    assert records[0].endswith(
        "key: offset_commit::group=g,partition=t-0 payload: offset=5,metadata=,commitTimestamp=0"
    )
    assert records[1].endswith("key: group_metadata::group=g payload: <DELETE>")
    assert "key: <unreadable key> payload: malformed __consumer_offsets key" in records[2]


def test_main_lists_a_txn_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's DumpLogSegments lists a .txnindex as one line per aborted transaction."""
    from services.storage.log.txn_index import AbortedTxn, TxnIndex

    path = tmp_path / "00000000000000000000.txnindex"
    idx = TxnIndex(path)
    idx.append(AbortedTxn(1000, 4, 6, 2))
    idx.append(AbortedTxn(1001, 7, 9, 10))
    assert main(["--files", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Dumping {path}",
        "version: 0 producerId: 1000 firstOffset: 4 lastOffset: 6 lastStableOffset: 2",
        "version: 0 producerId: 1001 firstOffset: 7 lastOffset: 9 lastStableOffset: 10",
    ]
    path.write_bytes(struct.pack(">hqqqq", 3, 1, 2, 3, 4))  # an unknown entry version
    assert main(["--files", str(path)]) == 1
    assert "unknown transaction index entry version 3" in capsys.readouterr().err


def test_transaction_log_decoder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from services.common.internal_topics.transaction_state import (
        TxnRecord,
        TxnState,
        transaction_key,
        transaction_value,
    )

    record = TxnRecord(7, 1, 60000, TxnState.ONGOING, frozenset({("t", 2)}), 11, 10)
    batch = build_batch(
        [
            Record(key=transaction_key("tx"), value=transaction_value(record)),
            Record(key=transaction_key("gone"), value=None),
        ]
    )
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch)
    assert main(["--files", str(path), "--transaction-log-decoder"]) == 0
    records = [line for line in capsys.readouterr().out.splitlines() if "| offset:" in line]
    assert records[0].endswith(
        "key: transaction_metadata::transactionalId=tx payload: producerId:7,producerEpoch:1,"
        "state=Ongoing,partitions=[t-2],txnLastUpdateTimestamp=11,txnTimeoutMs=60000"
    )
    assert records[1].endswith("key: transaction_metadata::transactionalId=gone payload: <DELETE>")
