"""Explorer runs as Spark tasks (`splitbrain explore --master URL`).

The explorer hands each generation of runs to an executor and takes the results back in run
order (harness.explore.engine), so running a generation's runs as the tasks of one Spark job, one
run a task, gives the same session for the same seed as a local run: random search has every run
of a generation in parallel, guided search keeps its corpus in the driver between generations.
"""

from __future__ import annotations

from splitbrain.harness.explore.engine import Executor, RunResult, Target, evaluate

APP_NAME = "splitbrain-explore"


def spark_executor(master: str) -> Executor:
    """An executor running each batch as one Spark job on `master` (the session is made once)."""
    from splitbrain.pipeline.session import get_spark, ship_code

    spark = get_spark(master, app_name=APP_NAME)
    ship_code(spark)
    sc = spark.sparkContext

    def run(target: Target, batch: list[tuple[dict, int, int]]) -> list[RunResult]:
        rdd = sc.parallelize(batch, max(1, len(batch)))
        results = rdd.map(lambda item: evaluate(target, item[0], item[1], item[2])).collect()
        return sorted(results, key=lambda r: r.index)

    return run
