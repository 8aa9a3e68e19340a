"""A Spark Connect client for ``test_connect``: the ``ydb_topic`` source through a Connect session.

    python -m tests.spark._connect_client <sc://host:port> <endpoint> <database> <topic> <sink> <checkpoint>

Runs in a process of its own, as a user's Connect application does (a Connect session and a
classic one do not share a process well). Prints one JSON object with what it saw.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    url, endpoint, database, topic, sink, checkpoint = sys.argv[1:7]
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ydb_topic_async.spark import register

    spark = SparkSession.builder.remote(url).getOrCreate()
    result: dict[str, Any] = {"session": type(spark).__module__}
    register(spark)  # the class is pickled here and unpickled by the server's Python workers
    connection = {"endpoint": endpoint, "database": database}

    rows = spark.read.format("ydb_topic").options(**connection, topic=topic).load()
    result["batch_read"] = sorted(r.data.decode() for r in rows.select("data").collect())

    written = spark.range(5).select(F.concat(F.lit("connect-"), F.col("id").cast("string")).alias("value"))
    written.write.format("ydb_topic").options(**connection, topic=sink).mode("append").save()
    result["batch_write"] = "ok"

    query = (
        spark.readStream.format("ydb_topic")
        .options(**connection, topic=topic, maxOffsetsPerTrigger="4")
        .load()
        .select(F.concat(F.lit(b"streamed:"), "data").alias("value"), F.col("producer_id").alias("key"))
        .writeStream.format("ydb_topic")
        .options(**connection, topic=sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    result["stream"] = {
        "active": query.isActive,
        "error": str(query.exception()) if query.exception() is not None else None,
        "batches": sum(1 for p in query.recentProgress if p.numInputRows),
    }

    try:  # under Connect, load() checks nothing: the first use of the DataFrame does
        bad = spark.read.format("ydb_topic").options(**connection, topic=topic, maxOffsetPerTrigger="1").load()
        result["bad_option"] = f"no error: {bad.schema}"
    except Exception as exc:
        result["bad_option"] = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    spark.stop()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
