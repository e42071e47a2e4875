"""Kafka's file names inside a log dir, and atomic small-file writes."""

from __future__ import annotations

import base64
import os
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded offset that names segment and snapshot files."""
    return f"{offset:020d}"


def log_file(dir: Path, base_offset: int) -> Path:
    return dir / (filename_prefix(base_offset) + LOG_SUFFIX)


def index_file(dir: Path, base_offset: int) -> Path:
    return dir / (filename_prefix(base_offset) + INDEX_SUFFIX)


def time_index_file(dir: Path, base_offset: int) -> Path:
    return dir / (filename_prefix(base_offset) + TIME_INDEX_SUFFIX)


def txn_index_file(dir: Path, base_offset: int) -> Path:
    return dir / (filename_prefix(base_offset) + TXN_INDEX_SUFFIX)


def suffixed(path: Path, suffix: str) -> Path:
    """``path`` with ``suffix`` appended to its name (``x.log`` -> ``x.log.swap``)."""
    return path.with_name(path.name + suffix) if suffix else path


def snapshot_file(dir: Path, offset: int) -> Path:
    return dir / (filename_prefix(offset) + SNAPSHOT_SUFFIX)


def offset_from_name(name: str) -> int | None:
    """Offset encoded in a segment/snapshot file name (``00000000000000000042.log`` -> 42)."""
    stem = name.split(".", 1)[0]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``<topic>-<partition>`` -> (topic, partition); None for other names and -delete/-future dirs."""
    if name.endswith(DELETE_DIR_SUFFIX) or name.endswith(FUTURE_DIR_SUFFIX):
        return None
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def fsync_dir(dir: Path) -> None:
    fd = os.open(dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write ``path`` through ``path.tmp`` + fsync + rename, so readers see old or new, never half."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def uuid_to_str(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    if len(raw) != 16:
        raise ValueError("a Kafka Uuid is 16 bytes")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return raw
