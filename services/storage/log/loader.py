"""Opening a log's directory: finishing interrupted swaps, removing leftovers, recovering
segments after an unclean shutdown, and replaying producer state (Kafka's ``LogLoader``).

Functions over the directory and a segment list; ``Log.open`` sequences them and keeps the
resulting state. Collaborators (the epoch cache, the producer state, the logger) are handed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from structlog.stdlib import BoundLogger

from services.common.records.batch import BatchHeader
from services.storage.log import files, transactions
from services.storage.log.config import LogConfig
from services.storage.log.leader_epoch import LeaderEpochCache
from services.storage.log.segment import LogSegment
from services.storage.producer_state import ProducerStateManager

_LEFTOVER_SUFFIXES = (
    files.DELETED_SUFFIX,
    files.CLEANED_SUFFIX,
    files.SWAP_SUFFIX,
    files.TMP_SUFFIX,
)


@dataclass(frozen=True)
class LogRecovery:
    """What the recovery at open did (also logged as ``log_recovered``)."""

    recovery_point: int
    from_segment: int  # base offset of the first segment read
    from_position: int  # where validation began in it (> 0: its fsynced prefix was skipped)
    segments_skipped: int  # segments wholly below the recovery point, not read
    segments_recovered: int
    batches_recovered: int  # batches validated (CRC32C)
    bytes_scanned: int  # bytes validated or cut
    bytes_truncated: int
    indexes_rebuilt: int


def complete_swaps(dir: Path, config: LogConfig, log: BoundLogger) -> None:
    """Finish compaction swaps cut short by a crash (Kafka's completeSwapOperations): a
    ``.swap`` segment is complete (fsynced before it got that name), so the live segments
    it replaces - those starting inside its offset range - go and it takes their place."""
    for swap in sorted(dir.glob("*" + files.LOG_SUFFIX + files.SWAP_SUFFIX)):
        base = files.offset_from_name(swap.name)
        if base is None:
            continue
        seg = LogSegment.load(dir, base, config, active=False, suffix=files.SWAP_SUFFIX)
        next_offset = base
        for h in seg.iter_headers():
            next_offset = h.next_offset
        seg.close_handles()
        replaced = []
        for p in dir.iterdir():
            off = files.offset_from_name(p.name)
            if (
                off is not None
                and base <= off < max(next_offset, base + 1)
                and p.name.endswith(
                    (
                        files.LOG_SUFFIX,
                        files.INDEX_SUFFIX,
                        files.TIME_INDEX_SUFFIX,
                        files.TXN_INDEX_SUFFIX,
                    )
                )
            ):
                p.unlink()
                replaced.append(p.name)
        seg.change_suffix("")
        log.warning("log_swap_completed", segment=base, next_offset=next_offset, replaced=replaced)


def remove_leftovers(dir: Path, log: BoundLogger) -> None:
    """Remove ``.deleted``/``.cleaned``/``.swap``/``.tmp`` files of an earlier run."""
    removed = []
    for p in dir.iterdir():
        if p.is_file() and p.name.endswith(_LEFTOVER_SUFFIXES):
            p.unlink(missing_ok=True)
            removed.append(p.name)
    if removed:
        log.info("log_leftovers_removed", files=removed)


def segment_bases(dir: Path, log: BoundLogger) -> list[int]:
    """Base offsets of the ``.log`` files in ``dir``, sorted; index files without their log
    file are removed."""
    bases: list[int] = []
    for p in dir.iterdir():
        off = files.offset_from_name(p.name)
        if off is None:
            continue
        if p.name.endswith(files.LOG_SUFFIX):
            bases.append(off)
        elif p.name.endswith((files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX)):
            if not files.log_file(dir, off).exists():
                log.warning("orphan_index_removed", file=p.name)
                p.unlink()
    bases.sort()
    return bases


def drop_segments_after(segments: list[LogSegment], i: int, log: BoundLogger) -> list[LogSegment]:
    """Delete the segments after index ``i`` (they follow a cut); returns those kept."""
    for seg in segments[i + 1 :]:
        log.warning("segment_deleted_after_corruption", segment=seg.base_offset, size=seg.size)
        seg.delete_files()
    return segments[: i + 1]


def recover_segments(
    segments: list[LogSegment],
    recovery_point: int,
    epoch_cache: LeaderEpochCache,
    log: BoundLogger,
) -> tuple[list[LogSegment], LogRecovery, int]:
    """Recover what follows ``recovery_point`` (Kafka's LogLoader.recoverLog, batch by batch).

    Segments wholly below it were fsynced and are not read. The segment holding it is
    validated from the batch holding ``recovery_point`` on (its fsynced prefix keeps its
    index entries; Kafka rescans that whole segment), later ones entirely. A torn or
    corrupt batch ends the log there: the segment is cut and later segments are deleted.
    Returns (segments kept, what was done, base offset of the first segment recovered).
    """
    segs = segments
    start = 0
    for i, seg in enumerate(segs):
        if seg.base_offset <= recovery_point:
            start = i
    latest_epoch = epoch_cache.latest_epoch

    def on_batch(h: BatchHeader) -> None:
        nonlocal latest_epoch
        epoch = h.partition_leader_epoch
        if epoch >= 0 and (latest_epoch is None or epoch > latest_epoch):
            epoch_cache.assign(epoch, h.base_offset)
            latest_epoch = epoch

    total_truncated = total_batches = bytes_scanned = rebuilt = 0
    from_position = 0
    i = start
    while i < len(segs):
        seg = segs[i]
        result = seg.recover(on_batch, flushed_offset=recovery_point if i == start else None)
        if i == start:
            from_position = result.start_position
        rebuilt += 1
        total_truncated += result.bytes_truncated
        total_batches += result.batches
        bytes_scanned += result.bytes_scanned
        if i < len(segs) - 1:
            if result.bytes_truncated:
                segs = drop_segments_after(segs, i, log)
                break
            seg.offset_index.make_readonly()
            seg.time_index.make_readonly()
        i += 1
    recovery = LogRecovery(
        recovery_point=recovery_point,
        from_segment=segs[start].base_offset if segs else 0,
        from_position=from_position,
        segments_skipped=start,
        segments_recovered=rebuilt,
        batches_recovered=total_batches,
        bytes_scanned=bytes_scanned,
        bytes_truncated=total_truncated,
        indexes_rebuilt=rebuilt * 2,
    )
    return segs, recovery, (segs[start].base_offset if start < len(segs) else 0)


def check_indexes(
    segments: list[LogSegment], recovered_from: int | None, log: BoundLogger
) -> tuple[list[LogSegment], int | None]:
    """Sanity of the indexes that recovery did not rebuild (those below ``recovered_from``,
    all when None): a missing or corrupt index, or trailing bytes in the last segment, gets
    that segment recovered; a cut in a rolled one drops the segments after it. Returns the
    segments kept and the base offset of the first one recovered here (None: none was)."""
    first_recovered: int | None = None
    for i, seg in enumerate(list(segments)):
        if recovered_from is not None and seg.base_offset >= recovered_from:
            break
        sane = seg.offset_index.is_sane(seg.size) and seg.time_index.is_sane()
        if sane and i == len(segments) - 1 and seg.scan_tail()[1] != seg.size:
            sane = False  # e.g. an untrimmed preallocated log file
        if not sane:
            log.warning(
                "segment_recovered_on_load",
                segment=seg.base_offset,
                reason="missing or corrupt index, or trailing bytes",
            )
            truncated = seg.recover().bytes_truncated
            if first_recovered is None:
                first_recovered = seg.base_offset
            if i < len(segments) - 1:
                seg.offset_index.make_readonly()
                seg.time_index.make_readonly()
            if truncated and i < len(segments) - 1:
                return drop_segments_after(segments, i, log), first_recovered
    return segments, first_recovered


def replay_producer_state(
    psm: ProducerStateManager,
    segments: list[LogSegment],
    log_start_offset: int,
    log_end_offset: int,
    log: BoundLogger,
    rebuild_from: int | None = None,
) -> int | None:
    """Load the latest usable snapshot (at or below ``rebuild_from`` when given: where
    recovery rewrote the log, whose ``.txnindex`` entries may be torn or lost) and replay the
    batch headers after it up to the log end; returns the offset replayed from (None when
    the snapshot was at the log end). The aborted transactions whose marker is replayed are
    written to the segments' ``.txnindex`` again (entries from the replayed range are dropped
    first), so a recovered or truncated log has the index its batches say."""
    start = psm.load_snapshot(log_start_offset, log_end_offset, rebuild_from)
    for i, seg in enumerate(segments):
        if i + 1 == len(segments) or segments[i + 1].base_offset > start:
            seg.txn_index.truncate_to(start)
    replayed_from: int | None = None
    if start < log_end_offset:
        replayed_from = start
        batches = 0
        for seg_idx, seg in enumerate(segments):
            nxt = segments[seg_idx + 1].base_offset if seg_idx + 1 < len(segments) else None
            if nxt is not None and nxt <= start:
                continue
            position = seg.offset_index.lookup(start)[1] if seg.base_offset <= start else 0
            for h in seg.iter_headers(position):
                if h.base_offset < start:
                    continue
                marker = transactions.segment_marker(seg, h) if h.is_control else None
                completed = psm.update(h, h.base_offset, h.last_offset, marker)
                transactions.record_completed(psm, seg, completed)
                batches += 1
        log.info(
            "producer_state_rebuilt",
            from_offset=start,
            to_offset=log_end_offset,
            batches=batches,
            producers=len(psm.producers),
        )
    psm.update_map_end_offset(log_end_offset)
    return replayed_from
