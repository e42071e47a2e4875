"""A topic's ``compression.type``: the batches a leader stores carry the topic's codec.

Only topics whose ``compression.type`` is a codec (not ``producer``) pay for this, and only
for batches written with another codec: everything else is stored as the producer sent it,
without decoding a record.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.common.records.batch import BatchHeader, parse_header
from services.common.records.record import recompress_batch


def needs_recompression(headers: Sequence[BatchHeader], codec: int | None) -> bool:
    """True if some (non-control) batch is not in ``codec`` (None: the producer's codec)."""
    if codec is None:
        return False
    return any(h.compression != codec and not h.is_control for h in headers)


def to_codec(
    records: bytearray, headers: Sequence[BatchHeader], codec: int
) -> tuple[bytearray, list[BatchHeader]]:
    """``records`` (whose batches are ``headers``) with every batch in ``codec``.

    Each batch is rewritten on its own, so producer id/epoch/sequence ranges stay per batch
    and idempotent retries are still recognised; control batches are kept as they are.
    Returns the new buffer and its headers (positions in the new buffer).
    """
    out = bytearray()
    new_headers: list[BatchHeader] = []
    view = memoryview(records)
    for h in headers:
        pos = len(out)
        if h.compression == codec or h.is_control:
            out += view[h.position : h.position + h.size]
        else:
            out += recompress_batch(records, h, codec)
        new_headers.append(parse_header(out, pos))
    return out, new_headers
