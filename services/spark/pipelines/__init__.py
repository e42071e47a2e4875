"""Spark pipelines shipped with kafka-py, run by `kafka-py pipeline run NAME`."""
