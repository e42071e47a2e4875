"""Message versions Kafka 3.x still serves but kio (generated from Kafka 4's specs) no longer
ships, written in kio's dataclass form so the codec reads them like any other schema.

- ListOffsets v0 (``ListOffsetsRequest.json`` / ``ListOffsetsResponse.json`` of Kafka 3.x):
  each partition asks for up to ``max_num_offsets`` offsets before ``timestamp`` and gets
  ``old_style_offsets`` back. Sarama-based tools (Burrow 1.2.1 with ``kafka-version`` < 0.10.1)
  send it.

No ``from __future__ import annotations`` here: the codec reads real annotations.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

LIST_OFFSETS = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionV0:
    __flexible__: ClassVar[bool] = False
    __version__: ClassVar[i16] = i16(0)
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})
    max_num_offsets: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicV0:
    __flexible__: ClassVar[bool] = False
    __version__: ClassVar[i16] = i16(0)
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequestV0:
    __flexible__: ClassVar[bool] = False
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
    replica_id: i32 = field(metadata={"kafka_type": "int32"})
    topics: tuple[ListOffsetsTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionResponseV0:
    __flexible__: ClassVar[bool] = False
    __version__: ClassVar[i16] = i16(0)
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicResponseV0:
    __flexible__: ClassVar[bool] = False
    __version__: ClassVar[i16] = i16(0)
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponseV0:
    __flexible__: ClassVar[bool] = False
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
    topics: tuple[ListOffsetsTopicResponseV0, ...]


# (api key, version) -> (request class, response class)
LEGACY: dict[tuple[int, int], tuple[type, type]] = {
    (LIST_OFFSETS, 0): (ListOffsetsRequestV0, ListOffsetsResponseV0),
}
