"""The part of Kafka's ConsumerProtocol the coordinator reads: a member's subscribed topics.

A ``ConsumerProtocolSubscription`` (any version) starts with an int16 version and the topics
array (int32 count, int16-length strings); later versions only append fields."""

from __future__ import annotations

import struct

PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a subscription, or None if ``metadata`` is not a valid one."""
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        if version < 0:
            return None
        (count,) = _I32.unpack_from(metadata, 2)
        if count < 0 or count > len(metadata):
            return None
        pos = 6
        topics: set[str] = set()
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(bytes(metadata[pos : pos + length]).decode("utf-8", "replace"))
            pos += length
        return topics
    except struct.error:
        return None
