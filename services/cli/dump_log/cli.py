"""`kafka-py dump-log`: print and check log segments, like Kafka's DumpLogSegments.

Output lines follow ``kafka-dump-log.sh`` (Kafka 3.x/4.x) so that people and scripts used to
it can read ours:

    Dumping /data/t-0/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 9 count: 10 baseSequence: 0 lastSequence: 9 producerId: 1000 ...
    | offset: 0 CreateTime: 1700000000000 keySize: 3 valueSize: 5 sequence: 0 headerKeys: [h1] ...
    Found 17 invalid bytes at the end of 00000000000000000000.log

Index checks follow Kafka's rules: an offset-index entry maps the *last* offset of a batch
(relative to the segment base) to the position where that batch starts; a time-index entry
holds the largest timestamp so far and the last offset of the batch that carries it. A
preallocated index that was never trimmed ends in zero entries: a zero relative offset after
the first entry ends the index. Problems go to ``err`` in Kafka's wording.

Deliberate differences from Kafka: the non-consecutive-offsets check starts from the segment's
base offset (Kafka starts from -1 and so flags every segment that does not start at 0), a batch
whose records cannot be decoded is reported instead of aborting the run, and an index entry that
points into the middle of a batch is reported as such.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from services.cli.dump_log.decoders import chosen_decoder
from services.cli.dump_log.indexes import dump_offset_index, dump_time_index
from services.cli.dump_log.result import DumpError
from services.cli.dump_log.segment_dump import dump_segment
from services.cli.dump_log.segment_reader import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from services.cli.dump_log.txn_index import TXN_INDEX_SUFFIX, dump_txn_index


def build_parser(prog: str = "kafka-py dump-log") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Parse log segments and their indexes and dump their contents, useful for "
            "debugging a seemingly corrupt log segment (like kafka-dump-log.sh)."
        ),
    )
    parser.add_argument(
        "--files",
        nargs="+",
        required=True,
        metavar="FILE",
        help=".log, .index, .timeindex and .txnindex files (space- or comma-separated)",
    )
    parser.add_argument(
        "--print-data-log", action="store_true", help="print record keys and payloads"
    )
    parser.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode records as __consumer_offsets keys and values (implies --print-data-log)",
    )
    parser.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="decode records as __transaction_state keys and values (implies --print-data-log)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print record metadata (no payloads)"
    )
    parser.add_argument(
        "--skip-record-metadata", action="store_true", help="print payloads without metadata"
    )
    parser.add_argument(
        "--verify-index-only", action="store_true", help="check index files without listing them"
    )
    parser.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only run the broker's start-up sanity check on index files",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool; 0 when every file could be read (even if it holds corruption), else 1."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed by argparse
        return exc.code if isinstance(exc.code, int) else 1
    files = [Path(name) for item in args.files for name in item.split(",") if name]
    explicit = {f.resolve() for f in files}
    decoder = chosen_decoder(args)
    status = 0
    for path in files:
        print(f"Dumping {path}", flush=True)
        try:
            if path.suffix == LOG_SUFFIX:
                # Index files named on the command line get their own, listed, dump.
                siblings = {
                    path.with_suffix(s).resolve() for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                }
                dump_segment(
                    path,
                    print_records=args.print_data_log or decoder is not None,
                    out=sys.stdout,
                    err=sys.stderr,
                    deep_iteration=args.deep_iteration,
                    skip_record_metadata=args.skip_record_metadata,
                    check_indexes=not (siblings & explicit),
                    decoder=decoder,
                )
            elif path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                dump = dump_offset_index if path.suffix == INDEX_SUFFIX else dump_time_index
                result = dump(
                    path,
                    out=sys.stdout,
                    err=sys.stderr,
                    verify_only=args.verify_index_only,
                    sanity_only=args.index_sanity_check,
                )
                if args.index_sanity_check and result.index_errors:
                    status = 1
            elif path.suffix == TXN_INDEX_SUFFIX:
                dump_txn_index(path, sys.stdout)
            else:
                print(f"Ignoring unknown file {path}", file=sys.stderr)
        except DumpError as exc:
            print(f"dump-log: error: {exc}", file=sys.stderr)
            status = 1
        sys.stdout.flush()
    return status
