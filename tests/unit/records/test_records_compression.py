"""Codecs: round trips, the exact framings Kafka clients expect, and corrupt input."""

import gzip
import random
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.errors import ErrorCode, KafkaError
from services.common.records.compression import (
    XERIAL_MAGIC,
    Codec,
    codec_name,
    compress,
    decompress,
)

CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
SAMPLES = [
    b"",
    b"x",
    b"hello kafka " * 50,
    bytes(range(256)) * 700,  # 179 KiB: several snappy (32 KiB) and lz4 (64 KiB) blocks
    bytes((i * 7919) % 251 for i in range(70_000)),  # poorly compressible
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}B")
def test_round_trip(codec: int, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, bytearray(packed)) == data


def test_names_match_kafka() -> None:
    assert [codec_name(c) for c in CODECS] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert codec_name(7) == "unknown(7)"


def test_gzip_is_a_standard_stream() -> None:
    data = b"abc" * 1000
    assert gzip.decompress(compress(Codec.GZIP, data)) == data
    assert decompress(Codec.GZIP, gzip.compress(data)) == data


def test_snappy_writes_xerial_framing() -> None:
    data = bytes(range(256)) * 300  # 76800 bytes -> blocks of 32768, 32768, 11264
    packed = compress(Codec.SNAPPY, data)
    assert packed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(b) for b in blocks] == [32768, 32768, 11264]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_blocks_and_concatenated_streams() -> None:
    data = b"librdkafka writes raw snappy " * 40
    assert decompress(Codec.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    one, two = compress(Codec.SNAPPY, b"first|"), compress(Codec.SNAPPY, b"second")
    assert decompress(Codec.SNAPPY, one + two) == b"first|second"


def test_lz4_writes_the_java_frame() -> None:
    data = bytes(range(256)) * 600  # 153600 bytes -> three blocks
    packed = compress(Codec.LZ4, data)
    # magic, FLG 0x60 (v1, independent blocks, no checksums), BD 0x40 (64 KiB), HC 0x82
    assert packed[:7] == bytes.fromhex("04224d18604082")
    assert packed[-4:] == b"\x00\x00\x00\x00"
    pos, out = 7, b""
    for expected in (65536, 65536, 22528):
        (word,) = struct.unpack_from("<I", packed, pos)
        size = word & 0x7FFFFFFF
        block = packed[pos + 4 : pos + 4 + size]
        # Each block decodes on its own: Java's reader has no cross-block dictionary.
        out += bytes(cramjam.lz4.decompress_block(block, output_len=expected))
        pos += 4 + size
    assert packed[pos:] == b"\x00\x00\x00\x00"
    assert out == data


def test_lz4_stores_incompressible_blocks() -> None:
    data = random.Random(7).randbytes(5000)  # incompressible
    packed = compress(Codec.LZ4, data)
    (word,) = struct.unpack_from("<I", packed, 7)
    assert word == len(data) | 0x80000000
    assert decompress(Codec.LZ4, packed) == data


def test_lz4_reads_frames_with_checksums() -> None:
    data = b"checksummed " * 500
    linked = cramjam.lz4.Compressor(content_checksum=True, block_linked=False)
    linked.compress(data)
    assert decompress(Codec.LZ4, bytes(linked.finish())) == data
    assert decompress(Codec.LZ4, bytes(cramjam.lz4.compress(data))) == data


def test_zstd_reads_streamed_frames() -> None:
    data = b"streamed zstd frame without content size " * 100
    stream = cramjam.zstd.Compressor()
    stream.compress(data)
    assert decompress(Codec.ZSTD, bytes(stream.finish())) == data


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    for call in (compress, decompress):
        with pytest.raises(KafkaError) as info:
            call(codec, b"data")
        assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_corrupt_input(codec: int) -> None:
    packed = compress(codec, b"some payload that compresses " * 20)
    for bad in (b"\x00\x01\x02\x03garbage", packed[: len(packed) // 2]):
        with pytest.raises(KafkaError) as info:
            decompress(codec, bad)
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_corrupt_xerial_block_length() -> None:
    packed = bytearray(compress(Codec.SNAPPY, b"abc" * 100))
    struct.pack_into(">i", packed, 16, 10_000)
    with pytest.raises(KafkaError) as info:
        decompress(Codec.SNAPPY, bytes(packed))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CODECS[1:]), st.binary(max_size=300), st.data())
def test_mutated_input_raises_only_kafka_errors(
    codec: int, payload: bytes, data: st.DataObject
) -> None:
    packed = bytearray(compress(codec, payload))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(packed) - 1))
        packed[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(packed)))
    try:
        decompress(codec, bytes(packed[:cut]))
    except KafkaError as exc:
        assert exc.code == ErrorCode.CORRUPT_MESSAGE
