"""PySpark's automatic data-source lookup imports top-level `pyspark_*` modules and registers
their `DefaultSource`: with kafka-py installed, `spark.read.format("kafkapy")` works without
`spark.dataSource.register(...)`."""

from services.spark.source import KafkaPyDataSource as DefaultSource

__all__ = ["DefaultSource"]
