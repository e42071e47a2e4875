"""The gateway's ErrorsPerSec: every error-code field of a response, by its schema."""

from __future__ import annotations

from prometheus_client import REGISTRY

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.protocol.bench_codec import metadata_response
from services.gateway.error_counts import error_counts, record


def test_each_partition_topic_and_top_level_code_counts() -> None:
    produce = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "error_code": ErrorCode.NOT_ENOUGH_REPLICAS},
                    {"index": 1, "error_code": 0},
                    {"index": 2},  # absent: encoded as NONE
                ],
            }
        ]
    }
    assert error_counts(ApiKey.PRODUCE, 9, produce) == {19: 1, 0: 2}
    fetch = {
        "error_code": 0,
        "responses": [{"partitions": [{"error_code": 1, "aborted_transactions": [{}]}]}],
    }
    assert error_counts(ApiKey.FETCH, 12, fetch) == {0: 1, 1: 1}
    assert error_counts(ApiKey.METADATA, 12, metadata_response(3, 4)) == {0: 3 + 3 * 4}
    # a field not in the schema is not an error code; no body, nothing
    assert error_counts(ApiKey.API_VERSIONS, 3, {"error_code": 35, "x": {"error_code": 1}}) == {
        35: 1
    }
    assert error_counts(ApiKey.PRODUCE, 9, None) == {}


def _sample(request: str, error: str) -> float:
    value = REGISTRY.get_sample_value(
        "kafka_network_requestmetrics_errors_total", {"request": request, "error": error}
    )
    return value or 0.0


def test_record_labels_by_error_name() -> None:
    before = _sample("Produce", "NOT_ENOUGH_REPLICAS"), _sample("Produce", "NONE")
    body = {
        "responses": [
            {"name": "t", "partition_responses": [{"error_code": 19}, {"error_code": 19}, {}]}
        ]
    }
    record("Produce", ApiKey.PRODUCE, 9, body)
    assert _sample("Produce", "NOT_ENOUGH_REPLICAS") == before[0] + 2
    assert _sample("Produce", "NONE") == before[1] + 1
    record(
        "Produce",
        ApiKey.PRODUCE,
        9,
        {"responses": [{"partition_responses": [{"error_code": 999}]}]},
    )
    assert _sample("Produce", "999") >= 1
