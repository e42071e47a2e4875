"""``partition.metadata``: the topic id of a partition directory (Kafka's PartitionMetadataFile).

Content::

    version: 0
    topic_id: <Uuid.toString(), URL-safe base64 without padding>
"""

from __future__ import annotations

from pathlib import Path

from services.storage.log.files import PARTITION_METADATA, atomic_write, uuid_from_str, uuid_to_str

PARTITION_METADATA_VERSION = 0


class CorruptPartitionMetadataError(Exception):
    pass


def format_partition_metadata(topic_id: bytes) -> bytes:
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_str(topic_id)}\n".encode()


def write_partition_metadata(dir: Path, topic_id: bytes) -> None:
    atomic_write(dir / PARTITION_METADATA, format_partition_metadata(topic_id))


def read_partition_metadata(dir: Path) -> bytes | None:
    """The topic id stored in ``dir``, or None when the file does not exist."""
    path = dir / PARTITION_METADATA
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise CorruptPartitionMetadataError(f"{path}: malformed line {line!r}")
        fields[key.strip()] = value.strip()
    if fields.get("version") != str(PARTITION_METADATA_VERSION):
        raise CorruptPartitionMetadataError(
            f"{path}: unrecognized version {fields.get('version')!r}"
        )
    try:
        return uuid_from_str(fields["topic_id"])
    except (KeyError, ValueError) as e:
        raise CorruptPartitionMetadataError(f"{path}: bad topic_id") from e
