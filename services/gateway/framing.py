"""Splitting a connection's byte stream into Kafka's size-prefixed frames, copying little.

Meant for ``asyncio.BufferedProtocol``: the transport reads into ``get_buffer()`` and reports
with ``filled(n)``. Small frames are read into a reused staging buffer and copied out as
``bytes``. A frame of ``large`` bytes or more is read by the transport directly into a
``bytearray`` of its own: up to ``segment`` bytes (4 MiB) that is the frame itself, so its record
batches reach the handlers (as memoryviews) without ever having been copied in this process.
A longer frame is read into segments of that size, allocated as its bytes arrive (a size
prefix alone never reserves more than one segment), and joined once complete. The staging
buffer starts small (idle connections hold 4 KiB) and grows, up to 256 KiB, when a frame needs
it; it is never resized, only replaced, so views handed out earlier stay valid.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
STAGE_BYTES = 256 * 1024
# What a connection's staging buffer starts at: idle connections (most of them, at thousands of
# connections) keep only this; a busy one grows its stage up to STAGE_BYTES as frames need it.
INITIAL_STAGE_BYTES = 4 * 1024
LARGE_FRAME = 64 * 1024
SEGMENT_BYTES = 4 * 1024 * 1024


class FrameSizeError(ValueError):
    """A size prefix below 0 or above the limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame size {size} outside 0..{limit}")
        self.size = size
        self.limit = limit


class FrameReader:
    def __init__(
        self,
        max_size: int,
        *,
        stage_bytes: int = STAGE_BYTES,
        large: int = LARGE_FRAME,
        segment: int = SEGMENT_BYTES,
        initial_stage: int = INITIAL_STAGE_BYTES,
    ) -> None:
        if stage_bytes < large + _SIZE.size:
            raise ValueError("the staging buffer must hold any frame smaller than `large`")
        self.max_size = max_size
        self._large = large
        self._segment = max(segment, 1)
        self._max_stage = stage_bytes
        self._stage = bytearray(max(_SIZE.size + 1, min(initial_stage, stage_bytes)))
        self._start = 0  # first unconsumed byte of the stage
        self._end = 0  # end of the data in the stage
        self._big: list[bytearray] = []  # segments of the large frame being read, if any
        self._big_pos = 0  # bytes filled in the last segment
        self._big_left = 0  # bytes of the large frame not yet in a segment

    def get_buffer(self) -> memoryview:
        """Where the transport should read next (never empty)."""
        if self._big:
            if self._big_pos == len(self._big[-1]):
                self._new_segment()
            return memoryview(self._big[-1])[self._big_pos :]
        stage = self._stage
        if len(stage) - self._end < min(self._large, len(stage) // 2) and self._start:
            self._compact()
            stage = self._stage
        if self._end == len(stage):  # full of frames not taken yet (reading paused late)
            self._grow(2 * len(stage))
            stage = self._stage
        return memoryview(stage)[self._end :]

    def filled(self, n: int) -> None:
        """The transport wrote ``n`` bytes at the start of the last ``get_buffer()``."""
        if self._big:
            self._big_pos += n
        else:
            self._end += n

    def next_frame(self) -> bytes | bytearray | None:
        """The next complete frame (without its size prefix), or None until more is read.

        Raises FrameSizeError for a size prefix out of bounds (the stream is then unusable)."""
        big = self._big
        if big:
            if self._big_left or self._big_pos < len(big[-1]):
                return None
            self._big = []
            return big[0] if len(big) == 1 else b"".join(big)
        start = self._start
        avail = self._end - start
        if avail < _SIZE.size:
            return None
        size = _SIZE.unpack_from(self._stage, start)[0]
        if size < 0 or size > self.max_size:
            raise FrameSizeError(size, self.max_size)
        body = start + _SIZE.size
        if avail - _SIZE.size >= size:
            with memoryview(self._stage) as view:
                frame = bytes(view[body : body + size])
            self._start = body + size
            if self._start == self._end:
                self._start = self._end = 0
            return frame
        if size >= self._large:
            have = self._end - body
            self._big_left = size
            self._new_segment(at_least=have)
            with memoryview(self._stage) as view:
                self._big[0][:have] = view[body : self._end]
            self._big_pos = have
            self._start = self._end = 0
        elif _SIZE.size + size > len(self._stage):  # a small frame larger than the stage
            self._grow(min(self._max_stage, max(2 * len(self._stage), _SIZE.size + size)))
        elif len(self._stage) - start < _SIZE.size + size:
            self._compact()
        return None

    def _grow(self, n: int) -> None:
        """Replace the stage by one of ``n`` bytes holding the unconsumed data at its start."""
        pending = self._end - self._start
        grown = bytearray(max(n, pending + 1))
        grown[:pending] = self._stage[self._start : self._end]
        self._stage = grown
        self._start, self._end = 0, pending

    def _new_segment(self, at_least: int = 0) -> None:
        n = min(self._big_left, max(self._segment, at_least))
        self._big.append(bytearray(n))
        self._big_left -= n
        self._big_pos = 0

    def _compact(self) -> None:
        n = self._end - self._start
        self._stage[:n] = self._stage[self._start : self._end]
        self._start, self._end = 0, n
