"""kafka-py's PySpark data source `kafkapy`: Spark's Kafka source and sink in Python.

Install with the `spark` extra. The source reads with the schema, options and checkpoint offset
JSON of Spark's built-in Kafka source; the sink writes `key`/`value`/`topic`/`partition`/
`headers` rows. `pyspark_kafkapy` (top-level module) exposes it for PySpark's automatic lookup.
"""

from services.spark.source import KafkaPyDataSource

__all__ = ["KafkaPyDataSource"]
