"""Property tests: whatever bytes a batch holds, decoding fails only with KafkaError."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.errors import KafkaError
from services.common.records.batch import HEADER_SIZE, parse_header
from services.common.records.compression import Codec
from services.common.records.record import Record, build_batch, iter_records

HEADERS = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
)
RECORDS = st.lists(
    st.builds(
        Record,
        timestamp=st.integers(0, 2**41),
        key=st.one_of(st.none(), st.binary(max_size=20)),
        value=st.one_of(st.none(), st.binary(max_size=60)),
        headers=HEADERS,
    ),
    min_size=0,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(RECORDS, st.sampled_from(list(Codec)))
def test_round_trip_any_records(records: list[Record], codec: int) -> None:
    batch = build_batch(records, base_offset=42, compression=codec)
    decoded = list(iter_records(batch, parse_header(batch)))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (42 + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RECORDS, st.sampled_from(list(Codec)), st.data())
def test_mutations_raise_only_kafka_errors(
    records: list[Record], codec: int, data: st.DataObject
) -> None:
    batch = bytearray(build_batch(records, compression=codec))
    for _ in range(data.draw(st.integers(1, 6), label="mutations")):
        # Mostly hit the records section; sometimes the header fields iter_records reads.
        low = data.draw(st.sampled_from([HEADER_SIZE, HEADER_SIZE, 8, 16, 21, 57]))
        if low >= len(batch):
            continue
        i = data.draw(st.integers(low, len(batch) - 1), label="index")
        batch[i] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="truncate"):
        batch = batch[: data.draw(st.integers(HEADER_SIZE, len(batch)), label="cut")]
    header = parse_header(batch)
    try:
        for record in iter_records(bytes(batch), header):
            assert record.key is None or isinstance(record.key, bytes)
            assert all(isinstance(k, str) for k, _ in record.headers)
    except KafkaError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 5), st.integers(-2, 2**31 - 1))
def test_random_record_sections(body: bytes, codec: int, count: int) -> None:
    batch = bytearray(build_batch([], compression=0)) + body
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[21:23] = codec.to_bytes(2, "big")
    batch[57:61] = count.to_bytes(4, "big", signed=True)
    try:
        list(iter_records(bytes(batch), parse_header(batch)))
    except KafkaError:
        pass
