"""Zig-zag varints: known encodings, round trips, malformed input."""

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.errors import ErrorCode, KafkaError
from services.common.records.varint import (
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_known_varint_encodings(value: int, encoded: bytes) -> None:
    # Values as Kafka's ByteUtils.writeVarint produces them.
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


def test_varlong_extremes() -> None:
    assert encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert decode_varlong(b"\xff" * 9 + b"\x01") == (-(2**63), 10)
    assert decode_varlong(b"\xfe" + b"\xff" * 8 + b"\x01") == (2**63 - 1, 10)


@given(INT32)
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(b"\xaa" + encoded + b"\x55", 1) == (value, 1 + len(encoded))


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varint(value) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))


@given(st.integers(0, 2**32 - 1))
def test_unsigned_varint_round_trip(value: int) -> None:
    assert decode_unsigned_varint(encode_unsigned_varint(value)) == (
        value,
        len(encode_unsigned_varint(value)),
    )


@pytest.mark.parametrize(
    ("decoder", "data"),
    [
        (decode_varint, b""),
        (decode_varint, b"\x80\x80"),  # truncated
        (decode_varint, b"\x80\x80\x80\x80\x80\x01"),  # six bytes
        (decode_varint, b"\xff\xff\xff\xff\x1f"),  # 35 significant bits
        (decode_varlong, b"\x80" * 10 + b"\x01"),  # eleven bytes
        (decode_varlong, b"\xff" * 9 + b"\x7f"),  # more than 64 bits
        (decode_unsigned_varint, b"\xff\xff\xff\xff\x7f"),
    ],
)
def test_malformed_input_is_corrupt_message(
    decoder: Callable[[bytes], tuple[int, int]], data: bytes
) -> None:
    with pytest.raises(KafkaError) as info:
        decoder(data)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@given(st.binary(max_size=12), st.integers(0, 12))
def test_decoders_only_raise_kafka_errors(data: bytes, pos: int) -> None:
    for decoder in (decode_varint, decode_varlong, decode_unsigned_varint):
        try:
            value, end = decoder(data, pos)
        except KafkaError as exc:
            assert exc.code == ErrorCode.CORRUPT_MESSAGE
        else:
            assert pos < end <= len(data)
            assert isinstance(value, int)


def test_encoders_reject_out_of_range() -> None:
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)
    with pytest.raises(ValueError):
        encode_unsigned_varint(-1)
