"""Kafka record-batch compression codecs (attribute bits 0-2), all through ``cramjam``.

What goes on the wire, per codec (decompression accepts what every known client writes):

- 1 gzip: a standard gzip stream.
- 2 snappy: we write the xerial snappy-java framing the Java producer writes
  (16-byte header ``0x82 'SNAPPY' 0x00`` + int32 version 1 + int32 compatible 1, then blocks
  ``[int32 length][raw snappy]`` of at most 32 KiB input each). librdkafka writes a bare raw
  snappy block instead; every client, and this module, reads both.
- 3 lz4: the LZ4 frame format as the Java producer writes it: independent blocks of at most
  64 KiB, no block or content checksum (Java rejects dependent blocks).
- 4 zstd: a standard zstd frame.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum

import cramjam

from services.common.errors import ErrorCode, KafkaError

Buffer = bytes | bytearray | memoryview


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Kafka's CompressionType.name, as DumpLogSegments prints it.
CODEC_NAMES: dict[int, str] = {c.value: c.name.lower() for c in Codec}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)  # 16
_XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default

# Magic, FLG (version 01, block independence), BD (64 KiB max block), header checksum
# (second byte of xxh32 over FLG+BD): byte for byte what Kafka's Lz4BlockOutputStream writes.
_LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_BLOCK_SIZE = 64 * 1024
_LZ4_UNCOMPRESSED_FLAG = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"

_INT32 = struct.Struct(">i")
_UINT32_LE = struct.Struct("<I")


def codec_name(codec: int) -> str:
    """Kafka's name for a codec id (``none``, ``gzip``, ...); ``unknown(<id>)`` otherwise."""
    return CODEC_NAMES.get(codec, f"unknown({codec})")


def compress(codec: int, data: Buffer) -> bytes:
    """Compress ``data`` with the codec numbered ``codec`` (0 returns the bytes unchanged)."""
    encoder = _ENCODERS.get(codec)
    if encoder is None:
        raise _unsupported(codec)
    return encoder(data)


def decompress(codec: int, data: Buffer) -> bytes:
    """Inverse of :func:`compress`; corrupt input raises ``KafkaError(CORRUPT_MESSAGE)``."""
    decoder = _DECODERS.get(codec)
    if decoder is None:
        raise _unsupported(codec)
    try:
        return decoder(data)
    except KafkaError:
        raise
    except Exception as exc:  # cramjam.DecompressionError, ValueError, struct.error, ...
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE, f"{codec_name(codec)} decompression failed: {exc}"
        ) from exc


def _unsupported(codec: int) -> KafkaError:
    return KafkaError(
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unsupported compression codec id {codec}"
    )


def _identity(data: Buffer) -> bytes:
    return bytes(data)


def _gzip_compress(data: Buffer) -> bytes:
    return bytes(cramjam.gzip.compress(data))


def _gzip_decompress(data: Buffer) -> bytes:
    return bytes(cramjam.gzip.decompress(data))


def _snappy_compress(data: Buffer) -> bytes:
    view = memoryview(data).cast("B")
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Buffer) -> bytes:
    view = memoryview(data).cast("B")
    if bytes(view[:8]) != XERIAL_MAGIC or len(view) < _XERIAL_HEADER_SIZE:
        return bytes(cramjam.snappy.decompress_raw(view))
    out: list[bytes] = []
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        # snappy-java also reads concatenated streams: a fresh header may follow a block.
        if bytes(view[pos : pos + 8]) == XERIAL_MAGIC:
            pos += _XERIAL_HEADER_SIZE
            continue
        if end - pos < 4:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "xerial snappy block length out of range")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(out)


def _lz4_compress(data: Buffer) -> bytes:
    view = memoryview(data).cast("B")
    parts = [_LZ4_FRAME_HEADER]
    for start in range(0, len(view), _LZ4_BLOCK_SIZE):
        chunk = view[start : start + _LZ4_BLOCK_SIZE]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):  # incompressible: store the block as is
            parts.append(_UINT32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_FLAG))
            parts.append(bytes(chunk))
        else:
            parts.append(_UINT32_LE.pack(len(block)))
            parts.append(block)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(data: Buffer) -> bytes:
    return bytes(cramjam.lz4.decompress(data))


def _zstd_compress(data: Buffer) -> bytes:
    return bytes(cramjam.zstd.compress(data))


def _zstd_decompress(data: Buffer) -> bytes:
    return bytes(cramjam.zstd.decompress(data))


_ENCODERS: dict[int, Callable[[Buffer], bytes]] = {
    Codec.NONE: _identity,
    Codec.GZIP: _gzip_compress,
    Codec.SNAPPY: _snappy_compress,
    Codec.LZ4: _lz4_compress,
    Codec.ZSTD: _zstd_compress,
}
_DECODERS: dict[int, Callable[[Buffer], bytes]] = {
    Codec.NONE: _identity,
    Codec.GZIP: _gzip_decompress,
    Codec.SNAPPY: _snappy_decompress,
    Codec.LZ4: _lz4_decompress,
    Codec.ZSTD: _zstd_decompress,
}
