"""splitbrain pipeline: event logs of runs into verdicts, metrics and plots (PySpark).

    from splitbrain.pipeline.session import get_spark
    from splitbrain.pipeline.analysis import analyze, build_report

    spark = get_spark()                                   # local[*], quiet; any master works
    result = analyze(spark, ["runs/"], "analysis/warehouse")   # ingest + checks + metrics
    build_report(spark, result, "analysis/report", title="my runs")

Modules: schema (the explicit event schema and the quarantine rules), ingest (run directories
-> Parquet warehouse), judging (the harness's checks per run in Spark tasks), checks and metrics
(DataFrame transforms for metrics and the advisory check), verdicts (outcomes), analysis
(orchestration), timeline and report (plots, HTML), cli (`splitbrain analyze`, `splitbrain
campaign`), job (spark-submit entry point). See docs/pipeline.md.
"""
