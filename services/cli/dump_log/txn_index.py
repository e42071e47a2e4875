"""DumpLogSegments' listing of a ``.txnindex`` file: one line per aborted transaction."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from services.cli.dump_log.result import DumpError
from services.common.errors import KafkaError
from services.storage.log.files import TXN_INDEX_SUFFIX
from services.storage.log.txn_index import VERSION, decode_entries

__all__ = ["TXN_INDEX_SUFFIX", "dump_txn_index"]


def dump_txn_index(path: Path, out: TextIO) -> None:
    """Print each entry as Kafka's tool does; an unreadable file is a DumpError."""
    try:
        data = path.read_bytes()
        entries = decode_entries(data)
    except OSError as exc:
        raise DumpError(f"cannot read {path}: {exc.strerror or exc}") from None
    except KafkaError as exc:
        raise DumpError(f"{path}: {exc.message}") from None
    for txn in entries:
        out.write(
            f"version: {VERSION} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
            f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}\n"
        )
