"""`kafka-py dump-log`: print and check log segments, like Kafka's DumpLogSegments.

The command line is in ``cli.py``; reading a ``.log`` in ``segment_reader.py``; the printed lines
(batch, record, control record) in ``formatting.py``; key/value decoders in ``decoders.py``;
index checks in ``indexes.py``; one segment's dump in ``segment_dump.py``.
"""

from services.cli.dump_log.cli import build_parser, main
from services.cli.dump_log.decoders import RecordDecoder
from services.cli.dump_log.formatting import format_batch, format_record
from services.cli.dump_log.indexes import dump_offset_index, dump_time_index
from services.cli.dump_log.result import DumpError, DumpResult
from services.cli.dump_log.segment_dump import dump_segment
from services.cli.dump_log.segment_reader import segment_base_offset

__all__ = [
    "DumpError",
    "DumpResult",
    "RecordDecoder",
    "build_parser",
    "dump_offset_index",
    "dump_segment",
    "dump_time_index",
    "format_batch",
    "format_record",
    "main",
    "segment_base_offset",
]
