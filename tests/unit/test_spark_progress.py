"""Pipeline progress: offsets behind from Spark's query progress, metrics and the CLI line."""

from __future__ import annotations

from prometheus_client import generate_latest

from services.spark.progress import ProgressMetrics, offsets_behind

PROGRESS = {
    "batchId": 3,
    "numInputRows": 1200,
    "inputRowsPerSecond": 400.0,
    "processedRowsPerSecond": 600.5,
    "sources": [
        {
            "endOffset": '{"t":{"0":100,"1":50}}',
            "latestOffset": {"t": {"0": 130, "1": 50, "2": 7}},
        }
    ],
    "sink": {"numOutputRows": 1200},
}


def test_offsets_behind_is_latest_minus_the_batch_end() -> None:
    assert offsets_behind(PROGRESS) == {("t", 0): 30, ("t", 1): 0, ("t", 2): 7}
    assert offsets_behind({"sources": [{"endOffset": None, "latestOffset": None}]}) == {}


def test_each_progress_is_counted_once_and_exported() -> None:
    m = ProgressMetrics("mirror")
    line = m.observe(PROGRESS)
    assert line == ("batch 3: 1200 rows, 400 rows/s in, 600 rows/s processed, 37 offsets behind")
    assert m.observe(PROGRESS) is None  # same batch polled again
    assert m.observe(None) is None
    m.observe({**PROGRESS, "batchId": 4, "numInputRows": 30, "sink": {"numOutputRows": -1}})
    text = generate_latest(m.registry).decode()
    assert 'kafkapy_pipeline_input_rows_total{pipeline="mirror"} 1230.0' in text
    assert 'kafkapy_pipeline_output_rows_total{pipeline="mirror"} 1200.0' in text
    assert 'kafkapy_pipeline_batch_id{pipeline="mirror"} 4.0' in text
    assert 'kafkapy_pipeline_offsets_behind{partition="0",pipeline="mirror",topic="t"} 30.0' in text


def test_sources_other_than_kafka_have_no_offsets_behind() -> None:
    """file-import reads Spark's file source, whose offsets are ``{"logOffset": N}``."""
    progress = {
        "sources": [
            {"endOffset": {"logOffset": 3}, "latestOffset": {"logOffset": 5}},
            {"endOffset": '{"t":{"0":4}}', "latestOffset": '{"t":{"0":9}}'},
        ]
    }
    assert offsets_behind(progress) == {("t", 0): 5}


def test_batches_finishing_between_two_polls_are_all_counted() -> None:
    """The CLI polls recentProgress once a second; two batches may finish in between, and an
    idle trigger reports the id of the batch that runs after it."""
    m = ProgressMetrics("mirror")
    first = {**PROGRESS, "batchId": 0, "timestamp": "2026-01-01T00:00:00.000Z"}
    idle = {**PROGRESS, "batchId": 1, "numInputRows": 0, "timestamp": "2026-01-01T00:00:01.000Z"}
    second = {**PROGRESS, "batchId": 1, "numInputRows": 10, "timestamp": "2026-01-01T00:00:02.000Z"}
    third = {**PROGRESS, "batchId": 2, "numInputRows": 5, "timestamp": "2026-01-01T00:00:03.000Z"}
    assert len(m.observe_all([first])) == 1
    assert len(m.observe_all([first, idle, second, third])) == 3
    assert m.observe_all([first, idle, second, third]) == []
    assert m.observe_all(None) == []
    text = generate_latest(m.registry).decode()
    assert 'kafkapy_pipeline_input_rows_total{pipeline="mirror"} 1215.0' in text
    assert 'kafkapy_pipeline_batch_id{pipeline="mirror"} 2.0' in text
