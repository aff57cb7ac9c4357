"""relay's Spark data source: verified transactions as rows, batch and streaming.

    import spark_consumer
    spark_consumer.register(spark)
    df = (spark.readStream.format("relay")
          .option("config", "cluster.toml").option("stream", "orders").load())

Options and columns: ``spark_consumer.options`` and ``spark_consumer.source``.
"""

from __future__ import annotations

from typing import Any

from spark_consumer.schema import SCHEMA
from spark_consumer.source import RelayDataSource

__all__ = ["SCHEMA", "RelayDataSource", "register"]


def register(spark: Any) -> None:
    """Make ``format("relay")`` available in this Spark session."""
    spark.dataSource.register(RelayDataSource)
