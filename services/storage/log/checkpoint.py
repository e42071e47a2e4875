"""Kafka's text checkpoint files.

Format (Kafka's CheckpointFile): a version line, a count line, then one entry per line::

    0
    2
    orders 0 1234
    orders 1 99

Broker-level files in each log dir: ``recovery-point-offset-checkpoint``,
``replication-offset-checkpoint`` (high watermarks), ``log-start-offset-checkpoint``.
Per partition, ``leader-epoch-checkpoint`` uses the same framing with ``<epoch> <offset>``
lines. Writes are atomic: ``<file>.tmp``, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from services.storage.log.files import atomic_write

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class CorruptCheckpointError(Exception):
    """A checkpoint file that does not follow the format."""


def format_checkpoint(lines: Iterable[str], version: int = CHECKPOINT_VERSION) -> bytes:
    body = list(lines)
    return (f"{version}\n{len(body)}\n" + "".join(line + "\n" for line in body)).encode()


def write_checkpoint_lines(
    path: Path, lines: Iterable[str], version: int = CHECKPOINT_VERSION, *, sync: bool = True
) -> None:
    atomic_write(path, format_checkpoint(lines, version), sync=sync)


def read_checkpoint_lines(path: Path, expected_version: int = CHECKPOINT_VERSION) -> list[str]:
    """Entry lines of a checkpoint file; [] when the file is missing or empty (as Kafka)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    if not text:
        return []
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()
    try:
        version = int(rows[0].strip())
    except (ValueError, IndexError):
        raise CorruptCheckpointError(f"{path}: malformed version line") from None
    if version != expected_version:
        raise CorruptCheckpointError(f"{path}: unrecognized version {version}")
    try:
        count = int(rows[1].strip())
    except (ValueError, IndexError):
        raise CorruptCheckpointError(f"{path}: malformed count line") from None
    entries = rows[2:]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries but found {len(entries)}")
    return entries


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``<topic> <partition> <offset>`` lines -> {(topic, partition): offset}."""
    out: dict[tuple[str, int], int] = {}
    for line in read_checkpoint_lines(path):
        parts = line.split()
        if len(parts) != 3:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}")
        try:
            out[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}") from None
    return out


def write_offset_checkpoint(
    path: Path, offsets: Mapping[tuple[str, int], int], *, sync: bool = True
) -> None:
    lines = [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())
    ]
    write_checkpoint_lines(path, lines, sync=sync)


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """``leader-epoch-checkpoint`` entries as (epoch, start offset)."""
    out: list[tuple[int, int]] = []
    for line in read_checkpoint_lines(path):
        parts = line.split()
        if len(parts) != 2:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}")
        try:
            out.append((int(parts[0]), int(parts[1])))
        except ValueError:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}") from None
    return out


def write_epoch_checkpoint(
    path: Path, entries: Iterable[tuple[int, int]], *, sync: bool = True
) -> None:
    write_checkpoint_lines(path, [f"{epoch} {offset}" for epoch, offset in entries], sync=sync)


def mark_clean_shutdown(log_dir: Path) -> None:
    """Write Kafka's ``.kafka_cleanshutdown`` marker after every log in ``log_dir`` was closed."""
    atomic_write(log_dir / CLEAN_SHUTDOWN_FILE, b"")


def take_clean_shutdown_marker(log_dir: Path) -> bool:
    """True if the last shutdown was clean; removes the marker (the next stop must write it again)."""
    marker = log_dir / CLEAN_SHUTDOWN_FILE
    if marker.exists():
        marker.unlink()
        return True
    return False
