"""Splitting a connection's byte stream into Kafka's size-prefixed frames, copying little.

Meant for ``asyncio.BufferedProtocol``: the transport reads into ``get_buffer()`` and reports
with ``filled(n)``. Small frames are read into a reused staging buffer and copied out as
``bytes``. A frame of ``large`` bytes or more gets a ``bytearray`` of its exact size, which the
transport then reads into directly: its record batches reach the handlers (as memoryviews)
without ever having been copied in this process. The staging buffer is never resized, only
replaced, so views handed out earlier stay valid.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
STAGE_BYTES = 256 * 1024
LARGE_FRAME = 64 * 1024


class FrameSizeError(ValueError):
    """A size prefix below 0 or above the limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame size {size} outside 0..{limit}")
        self.size = size
        self.limit = limit


class FrameReader:
    def __init__(
        self, max_size: int, *, stage_bytes: int = STAGE_BYTES, large: int = LARGE_FRAME
    ) -> None:
        if stage_bytes < large + _SIZE.size:
            raise ValueError("the staging buffer must hold any frame smaller than `large`")
        self.max_size = max_size
        self._large = large
        self._stage = bytearray(stage_bytes)
        self._start = 0  # first unconsumed byte of the stage
        self._end = 0  # end of the data in the stage
        self._big: bytearray | None = None  # the large frame being read, if any
        self._big_pos = 0

    def get_buffer(self) -> memoryview:
        """Where the transport should read next (never empty)."""
        if self._big is not None:
            return memoryview(self._big)[self._big_pos :]
        stage = self._stage
        if len(stage) - self._end < self._large and self._start:
            self._compact()
        if self._end == len(stage):  # full of complete frames not taken yet (reading paused late)
            grown = bytearray(2 * len(stage))
            grown[: self._end] = stage
            self._stage = stage = grown
        return memoryview(stage)[self._end :]

    def filled(self, n: int) -> None:
        """The transport wrote ``n`` bytes at the start of the last ``get_buffer()``."""
        if self._big is not None:
            self._big_pos += n
        else:
            self._end += n

    def next_frame(self) -> bytes | bytearray | None:
        """The next complete frame (without its size prefix), or None until more is read.

        Raises FrameSizeError for a size prefix out of bounds (the stream is then unusable)."""
        big = self._big
        if big is not None:
            if self._big_pos < len(big):
                return None
            self._big = None
            return big
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
            big = bytearray(size)
            have = self._end - body
            with memoryview(self._stage) as view:
                big[:have] = view[body : self._end]
            self._big, self._big_pos = big, have
            self._start = self._end = 0
        elif len(self._stage) - start < _SIZE.size + size:
            self._compact()
        return None

    def _compact(self) -> None:
        n = self._end - self._start
        self._stage[:n] = self._stage[self._start : self._end]
        self._start, self._end = 0, n
