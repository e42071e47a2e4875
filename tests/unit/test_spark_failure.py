"""A failed query's cause in one line, from the text Spark gives (shapes as PySpark 4 prints
them: a driver-side data-source error and an executor task failure)."""

from __future__ import annotations

from services.spark.failure import failure_line

DRIVER = """[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source \
perform partitions: Traceback (most recent call last):
  File "/x/pyspark.zip/pyspark/sql/streaming/python_streaming_source_runner.py", line 84, in main
  File "/w/services/spark/source.py", line 180, in partitions
    _report_loss(self.opts, f"{gone} are gone")
services.spark.options.KafkaPySparkError: [('t', 0)] are gone. Some data may have been lost
 SQLSTATE: 38000
=== Streaming Query ===
Identifier: [id = 7691, runId = 5dd1]
Current State: ACTIVE
"""

TASK = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted due to \
stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage \
3.0 (TID 5) (127.0.0.1 executor driver): org.apache.spark.api.python.PythonException: Traceback \
(most recent call last):
  File "/w/services/spark/reader.py", line 120, in read_range
ValueError: bad value
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(X.scala:1)
"""


def test_the_source_or_sink_message_is_the_line() -> None:
    assert failure_line(DRIVER) == "[('t', 0)] are gone. Some data may have been lost"


def test_else_the_last_python_exception_line_else_sparks_first_line() -> None:
    assert failure_line(TASK) == "bad value"
    assert failure_line("[X] it broke SQLSTATE: 42000\nmore") == "[X] it broke"
    assert failure_line("") == "the query failed without a message"
