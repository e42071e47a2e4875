"""One local Spark session per test module (a session costs ~7 s to start).

Python workers run this interpreter with this checkout on their path; Spark binds loopback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def spark_env() -> dict[str, str]:
    """Environment for Spark drivers and workers (also for subprocesses running a query)."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
    }


@contextmanager
def spark_session(app: str) -> Iterator[Any]:
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def copy_topic(
    bootstrap: str,
    source: str,
    target: str,
    checkpoint: str,
    limit: int,
    guarantee: str = "at-least-once",
) -> None:
    """A streaming query topic -> topic through the `kafkapy` source and sink (availableNow,
    at most `limit` records per micro-batch, the sink's `deliveryGuarantee`); run as a process
    so a test can kill it."""
    with spark_session("kafkapy-copy") as spark:
        query = (
            spark.readStream.format("kafkapy")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(limit))
            .option("includeHeaders", "true")
            .load()
            .selectExpr("key", "value", "partition", "headers")
            .writeStream.format("kafkapy")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", target)
            .option("deliveryGuarantee", guarantee)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()


if __name__ == "__main__":
    copy_topic(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), *sys.argv[6:])
