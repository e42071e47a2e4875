"""The benchmark script runs and measures what it claims (timings are not asserted)."""

from __future__ import annotations

import pytest

from services.common.protocol import ApiKey, decode_response, encode_response
from services.common.protocol.bench_codec import main, metadata_response, produce_request_frame


def test_bench_payloads_are_the_stated_shapes() -> None:
    body = metadata_response()
    partitions = [p for t in body["topics"] for p in t["partitions"]]
    assert len(partitions) == 1000 and all(len(p["replica_nodes"]) == 3 for p in partitions)
    assert decode_response(ApiKey.METADATA, 12, encode_response(3, 12, 1, body)[4:])[1] == body
    assert len(produce_request_frame()) > 100 * 16384


def test_bench_main_prints_both_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--iterations", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("MetadataResponse v12 encode") and " ms" in lines[0]
    assert lines[1].startswith("ProduceRequest v9 header+decode") and " us" in lines[1]
