"""`kafka-py pipeline run wordcount` against the local cluster: Kafka Streams' WordCountDemo as a
Spark query; its compacted output topic holds the right counts after two restarts.
`kafka-py pipeline run mirror` copies a topic between two clusters record for record (the
source read through SASL/SCRAM), with its progress on /metrics, and ends with one line when the
source topic is deleted under it."""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka_support import (
    Rec,
    TopicFactory,
    cli_ok,
    consume_confluent,
    kafka_py,
    make_records,
    produce_confluent,
    running_cluster,
    unique_topic_name,
    wait_for,
    wait_for_topic,
)
from prometheus_client.parser import text_string_to_metric_families
from spark_support import spark_env

from services.common.zk.server import free_port

if TYPE_CHECKING:
    from services.cli.local_cluster import LocalCluster

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


SCRAM_USER, SCRAM_PASSWORD = "mirror", "mirror-secret"


@contextmanager
def scram_cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, str]]:
    """A one-node cluster whose gateway also listens SASL_PLAINTEXT (SCRAM-SHA-256 user
    SCRAM_USER); yields it and that listener's address."""
    plain, sasl = free_port(), free_port()
    while sasl == plain:
        sasl = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    with running_cluster(
        tmp_path, storage_nodes=1, controllers=1, gateway_port=plain,
        extra={"gateway": ["--listeners", listeners]},
    ) as c:  # fmt: skip
        cli_ok(
            "configs", "--bootstrap-server", c.bootstrap, "--entity-type", "users",
            "--entity-name", SCRAM_USER, "--alter", "--add-config",
            f"SCRAM-SHA-256=[password={SCRAM_PASSWORD}]",
        )  # fmt: skip
        yield c, f"127.0.0.1:{sasl}"


@pytest.mark.timeout(600)  # a second cluster and a Spark process (minutes on a busy machine)
def test_mirror_copies_records_intact_between_clusters_with_progress_metrics(
    bootstrap: str, admin: AdminClient, tmp_path: Path
) -> None:
    """The source is a second cluster read through SASL_PLAINTEXT/SCRAM (--command-config, so
    the Spark source and the mirror's admin calls authenticate); the target is the session
    cluster. The records carry 2020 CreateTimes: the source topic keeps them with
    retention.ms=-1 (the default 7 days deletes them, as Kafka does; this test's old
    instability: the query started after a retention check saw an empty topic) and the mirror
    creates the target topic with that config. Deleting the source topic mid-query then ends
    the CLI (failOnDataLoss) with one line and exit code 1."""
    with scram_cluster(tmp_path / "source") as (src_cluster, sasl_bootstrap):
        src_admin = AdminClient({"bootstrap.servers": src_cluster.bootstrap})
        source = unique_topic_name("mirror")
        src_admin.create_topics([NewTopic(source, 3, 1, config={"retention.ms": "-1"})])[
            source
        ].result(60)
        wait_for_topic(src_admin, source, 3)
        records = make_records(source, MIRRORED, base_ts=1_600_000_000_000)
        produce_confluent(
            src_cluster.bootstrap, source, records, config={"compression.type": "lz4"}
        )
        command_config = tmp_path / "source.properties"
        command_config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            f"sasl.username={SCRAM_USER}\nsasl.password={SCRAM_PASSWORD}\n"
        )
        port = free_port()
        cmd = [sys.executable, "-m", "services.cli", "pipeline", "run", "mirror",
               "--bootstrap-server", sasl_bootstrap, "--command-config", str(command_config),
               "--target-bootstrap-server", bootstrap,
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
            if proc.poll() is not None:
                raise AssertionError(f"the mirror ended (exit {proc.returncode})")
            m = _scrape(port)
            return m.get(("kafkapy_pipeline_input_rows_total", label), 0) >= MIRRORED and all(
                m.get(("kafkapy_pipeline_offsets_behind", b)) == 0 for b in behind
            )

        try:
            try:
                wait_for("the mirror to catch up", caught_up, timeout=420, interval=0.5)
                metrics = _scrape(port)
            except AssertionError as exc:
                out = out_file.read_text()[-2000:]
                raise AssertionError(
                    f"{exc}; stdout: {out}; stderr: {err_file.read_text()[-3000:]}"
                ) from None
            assert metrics[("kafkapy_pipeline_input_rows_total", label)] == MIRRORED
            assert metrics[("kafkapy_pipeline_batch_id", label)] >= 2  # ≤ 20,000 records a batch
            assert metrics[("kafkapy_pipeline_processed_rows_per_second", label)] > 0
            assert "offsets behind" in out_file.read_text(), err_file.read_text()[-3000:]
            want = consume_confluent(src_cluster.bootstrap, source, [0, 1, 2], MIRRORED)
            got = consume_confluent(bootstrap, source, [0, 1, 2], MIRRORED)
            # same partitions, offsets, keys, values, headers, CreateTime timestamps
            assert got == want
            (desc,) = admin.describe_configs([ConfigResource("topic", source)]).values()
            assert desc.result(30)["retention.ms"].value == "-1"  # synced from the source

            src_admin.delete_topics([source])[source].result(60)
            code = proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            with contextlib.suppress(Exception):
                admin.delete_topics([source])[source].result(30)
    err = err_file.read_text()
    assert code == 1, err[-3000:]
    # one readable line: no Java stack frame, no Python traceback
    assert "\tat " not in err and "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: pipeline mirror failed: ") and "are gone" in last, err[-3000:]
