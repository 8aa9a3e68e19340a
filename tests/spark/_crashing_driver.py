"""A Spark driver for the layout tests: it starts one streaming query per scenario and runs until
it is SIGKILLed, mid-way through each query's first micro-batch.

    python -m tests.spark._crashing_driver <endpoint> <database> <scenarios.json>

Each scenario is ``{"source", "sink", "checkpoint", "options", "shape"}``: a ``ydb_topic`` read
with ``options``, shaped by ``shape`` (see ``shaped``), written by the exactly-once sink. The sink
gets rows 20 at a time, and every row costs the JVM 25 ms before it (sleeping: eight task slots
take little CPU). Every query has a scheduler pool of its own, so their tasks take turns. Prints
``started`` when every query runs; then each line ``freeze <n>`` on its standard input makes every
further row of scenario ``n`` cost 5 s, so that a query that stored part of its micro-batch cannot
finish it before the kill.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def shaped(df: Any, shape: str) -> Any:
    """``df`` with the Spark partitioning a scenario asks for: ``coalesce:<n>``, ``repartition:<n>``
    (hashed by ``data``: in local mode each task fetches the map outputs in the same order, so the
    rows of a Spark partition come in the same order every time), or ``""`` (none)."""
    kind, _, count = shape.partition(":")
    if kind == "coalesce":
        return df.coalesce(int(count))
    if kind == "repartition":
        return df.repartition(int(count), "data")
    return df


def main() -> None:
    endpoint, database, scenarios_file = sys.argv[1:4]
    with open(scenarios_file) as file:
        scenarios = json.load(file)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ydb_topic_async.spark import register

    spark = (
        SparkSession.builder.master("local[8]")
        .appName("ydb-topic-crashing-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    connection = {"endpoint": endpoint, "database": database}
    jvm: Any = spark.sparkContext._jvm
    for n, scenario in enumerate(scenarios):
        # Always true, but Spark's optimizer cannot know it, so the JVM sleeps for every row: 25 ms,
        # or 5 s once the scenario is frozen (a JVM system property, looked at for every row).
        frozen = f"coalesce(reflect('java.lang.System', 'getProperty', 'ydb.topic.test.freeze.{n}'), '') = '1'"
        slow = F.expr(
            f"length(coalesce(reflect('java.lang.Thread', 'sleep', CAST(IF({frozen}, 5000, 25) AS BIGINT)), '')) >= 0"
        )
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", f"scenario-{n}")
        source = spark.readStream.format("ydb_topic").options(**connection, topic=scenario["source"])
        df = shaped(source.options(**scenario["options"]).load().select("data"), scenario["shape"])
        (
            df.filter(slow)
            .writeStream.format("ydb_topic")
            .options(**connection, topic=scenario["sink"])
            .option("checkpointLocation", scenario["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
    print("started", flush=True)
    for line in sys.stdin:  # until SIGKILLed
        command, _, scenario_number = line.partition(" ")
        if command == "freeze":
            jvm.java.lang.System.setProperty(f"ydb.topic.test.freeze.{int(scenario_number)}", "1")
            print(f"frozen {int(scenario_number)}", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
