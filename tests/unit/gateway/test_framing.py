"""FrameReader: frames out of any chunking of the stream, large frames read in place."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gateway.framing import FrameReader, FrameSizeError


def _framed(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


def _feed(reader: FrameReader, data: bytes, cut: int) -> list[bytes | bytearray]:
    """Write ``data`` into the reader's buffers at most ``cut`` bytes per read."""
    frames: list[bytes | bytearray] = []
    pos = 0
    while pos < len(data):
        buf = reader.get_buffer()
        n = min(len(buf), cut, len(data) - pos)
        assert n > 0
        buf[:n] = data[pos : pos + n]
        reader.filled(n)
        pos += n
        while (frame := reader.next_frame()) is not None:
            frames.append(frame)
    return frames


@given(
    bodies=st.lists(st.binary(max_size=300) | st.integers(0, 2000).map(bytes), max_size=12),
    cut=st.integers(1, 700),
)
def test_any_chunking_gives_the_same_frames(bodies: list[bytes], cut: int) -> None:
    reader = FrameReader(10_000, stage_bytes=1100, large=1000)
    assert _feed(reader, _framed(*bodies), cut) == bodies


def test_large_frame_is_read_into_its_own_buffer() -> None:
    reader = FrameReader(1 << 20, stage_bytes=1100, large=1000)
    big = bytes(range(256)) * 20
    data = _framed(b"hi", big, b"after")
    # first read: the small frame plus the start of the big one
    buf = reader.get_buffer()
    buf[:50] = data[:50]
    reader.filled(50)
    assert reader.next_frame() == b"hi"
    assert reader.next_frame() is None
    # from now on the transport writes straight into the frame's own buffer
    buf = reader.get_buffer()
    assert len(buf) == len(big) - (50 - 6 - 4)
    rest = _feed(reader, data[50:], 10_000)
    assert rest == [big, b"after"]
    assert isinstance(rest[0], bytearray)


def test_many_small_frames_waiting_grow_the_stage() -> None:
    reader = FrameReader(1000, stage_bytes=120, large=100)
    data = _framed(*[bytes([i]) * 20 for i in range(10)])  # 240 bytes, never taken
    pos = 0
    while pos < len(data):
        buf = reader.get_buffer()
        n = min(len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        reader.filled(n)
        pos += n
    frames = []
    while (frame := reader.next_frame()) is not None:
        frames.append(frame)
    assert frames == [bytes([i]) * 20 for i in range(10)]


@pytest.mark.parametrize("size", [-1, 1001])
def test_size_out_of_bounds(size: int) -> None:
    reader = FrameReader(1000, stage_bytes=1100, large=1000)
    buf = reader.get_buffer()
    buf[:4] = struct.pack(">i", size)
    reader.filled(4)
    with pytest.raises(FrameSizeError) as err:
        reader.next_frame()
    assert err.value.size == size and err.value.limit == 1000


def test_frames_longer_than_a_segment_are_read_in_segments() -> None:
    reader = FrameReader(1 << 20, stage_bytes=1100, large=1000, segment=1500)
    big = bytes(range(256)) * 20  # 5120 bytes: four segments
    data = _framed(big, b"next")
    buf = reader.get_buffer()
    buf[:8] = data[:8]  # the size prefix and a few bytes
    reader.filled(8)
    assert reader.next_frame() is None
    assert len(reader.get_buffer()) == 1500 - 4  # no more than one segment reserved
    assert _feed(reader, data[8:], 700) == [big, b"next"]


@given(
    bodies=st.lists(st.integers(0, 5000).map(lambda n: bytes([n % 251]) * n), max_size=6),
    cut=st.integers(1, 3000),
)
def test_segmented_frames_any_chunking(bodies: list[bytes], cut: int) -> None:
    for segment in (50, 1200):  # 50: the staged start of a frame outgrows its first segment
        reader = FrameReader(10_000, stage_bytes=1100, large=1000, segment=segment)
        assert _feed(reader, _framed(*bodies), cut) == bodies


@settings(deadline=None, max_examples=60)  # frames up to 70 KB: slow to draw, not to check
@given(
    bodies=st.lists(st.binary(max_size=3000) | st.integers(0, 70_000).map(bytes), max_size=10),
    cut=st.integers(1, 90_000),
)
def test_a_small_stage_grows_to_whatever_the_frames_need(bodies: list[bytes], cut: int) -> None:
    """The default reader starts at 4 KiB and must still give every frame of any size."""
    reader = FrameReader(1 << 20)
    assert _feed(reader, _framed(*bodies), cut) == bodies


def test_idle_connections_keep_a_small_stage_busy_ones_grow_it() -> None:
    reader = FrameReader(1 << 20)
    assert _feed(reader, _framed(b"x" * 100, b"y" * 200), 1 << 20) == [b"x" * 100, b"y" * 200]
    assert len(reader._stage) == 4 * 1024  # what thousands of idle connections each hold
    frame = bytes(range(256)) * 200  # 51,200 bytes: below `large`, so staged
    assert _feed(reader, _framed(frame), 10_000) == [frame]
    assert 51_204 <= len(reader._stage) <= 256 * 1024
