"""`kafka-py pipeline run wordcount` against the local cluster: Kafka Streams' WordCountDemo as a
Spark query; its compacted output topic holds the right counts after two restarts.
`kafka-py pipeline run mirror` copies a topic to a second cluster record for record, with its
progress on /metrics."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka_support import (
    Rec,
    TopicFactory,
    consume_confluent,
    kafka_py,
    make_records,
    produce_confluent,
    running_cluster,
    unique_topic_name,
    wait_for,
)
from prometheus_client.parser import text_string_to_metric_families
from spark_support import spark_env

from services.common.zk.server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROUNDS = (
    ["all streams lead to kafka", "hello kafka streams", "join kafka summit"],
    ["Kafka, streams and SPARK!", "", "hello   spark"],
    ["kafka kafka kafka", "streams-of-words"],
)


@pytest.mark.timeout(900)  # three Spark processes (~20 s each idle, minutes on a busy machine)
def test_wordcount_counts_survive_two_restarts(
    bootstrap: str, topic: TopicFactory, admin: AdminClient, tmp_path: Path
) -> None:
    lines = topic(2)
    output = unique_topic_name("wordcount-out")
    os.environ.update(spark_env())
    expected: Counter[str] = Counter()
    for i, round_lines in enumerate(ROUNDS):
        recs = [Rec(j % 2, None, line.encode(), (), 0) for j, line in enumerate(round_lines)]
        produce_confluent(bootstrap, lines, recs)
        for line in round_lines:
            expected.update(w for w in _split(line) if w)
        res = kafka_py(
            "pipeline", "run", "wordcount", "--bootstrap-server", bootstrap,
            "--input", lines, "--output", output, "--checkpoint", str(tmp_path / "ckpt"),
            "--available-now", timeout=240,
        )  # fmt: skip
        assert res.returncode == 0, f"run {i}: {res.stderr[-3000:]}"
    (desc,) = admin.describe_configs([ConfigResource("topic", output)]).values()
    assert desc.result(30)["cleanup.policy"].value == "compact"
    got = consume_confluent(bootstrap, output, [0], 1)
    latest = {r.rec.key.decode(): struct.unpack(">q", r.rec.value)[0] for r in got[0]}
    assert latest == dict(expected)


def _split(line: str) -> list[str]:
    import re

    return re.split(r"\W+", line.lower())


MIRRORED = 50_000


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The pipeline's /metrics as {(sample name, sorted labels): value}; {} while not served."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


@pytest.mark.timeout(600)  # a second cluster and a Spark process (minutes on a busy machine)
@pytest.mark.skip(
    reason="unstable, issue 16: in 3 of its last 5 runs the mirror's query saw the source topic "
    "empty (batch 0: 0 rows, 0 offsets behind); the mirror is not claimed until this is found"
)
def test_mirror_copies_records_intact_between_clusters_with_progress_metrics(
    bootstrap: str, topic: TopicFactory, tmp_path: Path
) -> None:
    source = topic(3)
    records = make_records(source, MIRRORED, base_ts=1_600_000_000_000)
    produce_confluent(bootstrap, source, records, config={"compression.type": "lz4"})
    with running_cluster(tmp_path / "target", storage_nodes=1, controllers=1) as target:
        port = free_port()
        cmd = [sys.executable, "-m", "services.cli", "pipeline", "run", "mirror",
               "--bootstrap-server", bootstrap, "--target-bootstrap-server", target.bootstrap,
               "--topics", source, "--checkpoint", str(tmp_path / "ckpt"),
               "--max-offsets-per-trigger", "20000", "--metrics-port", str(port)]  # fmt: skip
        # output to files: a pipe nobody reads would block Spark once its buffer fills
        out_file, err_file = tmp_path / "mirror.out", tmp_path / "mirror.err"
        with out_file.open("w") as o, err_file.open("w") as e:
            proc = subprocess.Popen(cmd, env={**os.environ, **spark_env()}, stdout=o, stderr=e,
                                    start_new_session=True)  # fmt: skip
        label = (("pipeline", "mirror"),)
        behind = [
            (("partition", str(p)), ("pipeline", "mirror"), ("topic", source)) for p in range(3)
        ]

        def caught_up() -> bool:
            m = _scrape(port)
            return m.get(("kafkapy_pipeline_input_rows_total", label), 0) >= MIRRORED and all(
                m.get(("kafkapy_pipeline_offsets_behind", b)) == 0 for b in behind
            )

        try:
            wait_for("the mirror to catch up", caught_up, timeout=420, interval=0.5)
            metrics = _scrape(port)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; stderr: {err_file.read_text()[-3000:]}") from None
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out, err = out_file.read_text(), err_file.read_text()
        assert metrics[("kafkapy_pipeline_input_rows_total", label)] == MIRRORED
        assert metrics[("kafkapy_pipeline_batch_id", label)] >= 2  # 20,000 records a batch at most
        assert metrics[("kafkapy_pipeline_processed_rows_per_second", label)] > 0
        assert "offsets behind" in out, err[-3000:]
        want = consume_confluent(bootstrap, source, [0, 1, 2], MIRRORED)
        got = consume_confluent(target.bootstrap, source, [0, 1, 2], MIRRORED)
        # same partitions, offsets, keys, values, headers, CreateTime timestamps
        assert got == want
