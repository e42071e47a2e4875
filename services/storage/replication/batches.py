"""The record batches a follower receives from its leader.

The leader already validated and assigned offsets; the follower only checks framing, magic and
CRC (Kafka's ``appendAsFollower`` validation) before appending them as they are. A partial batch
at the end (never sent by our leaders, but allowed by the Fetch protocol) is left out.
"""

from __future__ import annotations

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import (
    CURRENT_MAGIC,
    MAGIC_OFFSET,
    BatchHeader,
    crc_ok,
    iter_headers,
)


def follower_batches(records: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Headers of the complete batches of ``records``; raises CORRUPT_MESSAGE on a bad one."""
    headers: list[BatchHeader] = []
    for h in iter_headers(records):
        magic = records[h.position + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"batch at offset {h.base_offset} has magic {magic}"
            )
        if not crc_ok(records, h):
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"batch at offset {h.base_offset} fails its CRC"
            )
        headers.append(h)
    return headers
