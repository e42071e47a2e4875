"""Codec micro-benchmark: `python -m services.common.protocol.bench_codec [--iterations N]`.

Prints the time to encode a MetadataResponse v12 with 1,000 partitions (100 topics x 10
partitions, 3 replicas each) into a full frame, and to parse + decode a ProduceRequest v9 of
10 topics x 10 partitions x 16 KiB records (records stay memoryview slices).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from .api_keys import ApiKey
from .headers import parse_request_header
from .messages import decode_request, encode_request, encode_response


def metadata_response(topics: int = 100, partitions: int = 10, replicas: int = 3) -> dict[str, Any]:
    brokers = [
        {"node_id": n, "host": f"gateway-{n}.kafka", "port": 9092, "rack": f"az{n}"}
        for n in range(replicas)
    ]
    return {
        "throttle_time": 0,
        "brokers": brokers,
        "cluster_id": "kafka-py-bench",
        "controller_id": 0,
        "topics": [
            {
                "error_code": 0,
                "name": f"topic-{t:03d}",
                "topic_id": os.urandom(16),
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": p,
                        "leader_id": p % replicas,
                        "leader_epoch": 3,
                        "replica_nodes": [(p + r) % replicas for r in range(replicas)],
                        "isr_nodes": [(p + r) % replicas for r in range(replicas)],
                        "offline_replicas": [],
                    }
                    for p in range(partitions)
                ],
                "topic_authorized_operations": -(2**31),
            }
            for t in range(topics)
        ],
    }


def produce_request_frame(
    topics: int = 10, partitions: int = 10, record_bytes: int = 16384
) -> bytes:
    records = os.urandom(record_bytes)
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 30000,
        "topic_data": [
            {
                "name": f"topic-{t}",
                "partition_data": [{"index": p, "records": records} for p in range(partitions)],
            }
            for t in range(topics)
        ],
    }
    return encode_request(ApiKey.PRODUCE, 9, 1, "bench", body)[4:]


def _time(fn: Callable[[], object], iterations: int, repeats: int = 5) -> tuple[float, float]:
    """(best, median) seconds per call over `repeats` batches of `iterations` calls."""
    fn()  # warm-up: code generation happens on first use
    batches = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        batches.append((time.perf_counter() - start) / iterations)
    return min(batches), statistics.median(batches)


def bench_metadata_encode(iterations: int) -> tuple[float, float, int]:
    body = metadata_response()
    size = len(encode_response(ApiKey.METADATA, 12, 1, body))
    best, median = _time(lambda: encode_response(ApiKey.METADATA, 12, 1, body), iterations)
    return best, median, size


def bench_produce_decode(iterations: int) -> tuple[float, float, int]:
    frame = produce_request_frame()

    def run() -> object:
        header, offset = parse_request_header(frame)
        return decode_request(header.api_key, header.api_version, frame, offset)

    best, median = _time(run, iterations)
    return best, median, len(frame)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args(argv)
    best, median, size = bench_metadata_encode(args.iterations)
    print(
        f"MetadataResponse v12 encode, 100 topics x 10 partitions x 3 replicas ({size} B frame):"
        f" best {best * 1e3:.3f} ms, median {median * 1e3:.3f} ms"
    )
    best, median, size = bench_produce_decode(args.iterations * 5)
    print(
        f"ProduceRequest v9 header+decode, 10 topics x 10 partitions x 16 KiB ({size} B frame):"
        f" best {best * 1e6:.1f} us, median {median * 1e6:.1f} us"
    )


if __name__ == "__main__":
    main()
