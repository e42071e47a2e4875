"""`kafka-py pipeline run wordcount` against the local cluster: Kafka Streams' WordCountDemo as a
Spark query; its compacted output topic holds the right counts after two restarts."""

from __future__ import annotations

import os
import struct
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka_support import (
    Rec,
    TopicFactory,
    consume_confluent,
    kafka_py,
    produce_confluent,
    unique_topic_name,
)
from spark_support import spark_env

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
