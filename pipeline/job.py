"""spark-submit entry point: read run directories, judge them, write the results. Nothing else.

    spark-submit --master spark://HOST:7077 --py-files pipeline.zip pipeline/job.py \\
        --warehouse s3a://bucket/splitbrain/warehouse \\
        --verdicts s3a://bucket/splitbrain/verdicts/2026-11-22 \\
        s3a://bucket/splitbrain/runs/

Arguments: run directories (or directories of them) on any Hadoop file system; --warehouse, the
Parquet warehouse (events, quarantine, runs); --verdicts, where one JSON line per run is written
(any Hadoop URI); --json and --report, local files of the driver (a verdicts list, the HTML
report). Exit code: 0 every run passed, 1 a run failed, 2 bad input. See docs/pipeline.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if __package__ in (None, ""):
    # Run as a file (spark-submit pipeline/job.py): make the package importable from a checkout;
    # with --py-files pipeline.zip the zip is already on sys.path and wins.
    sys.path.append(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="pipeline/job.py", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--warehouse", required=True, metavar="URI")
    p.add_argument("--verdicts", default=None, metavar="URI", help="write one JSON line per run here")
    p.add_argument("--json", default=None, metavar="PATH", help="driver-local file for all verdicts (JSON)")
    p.add_argument("--report", default=None, metavar="DIR", help="driver-local directory for the HTML report")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from splitbrain.pipeline import analysis as A
    from splitbrain.pipeline.ingest import InputError
    from splitbrain.pipeline.session import get_spark

    spark = get_spark()
    try:
        analysis = A.analyze(spark, args.run_dirs, args.warehouse)  # read + transform (+ warehouse)
    except InputError as exc:
        print(f"pipeline/job.py: {exc}", file=sys.stderr)
        return 2
    lines = [json.dumps(v.to_dict(), default=str) for v in analysis.verdicts]
    if args.verdicts:
        spark.createDataFrame([(line,) for line in lines], "value string").coalesce(1).write.mode("overwrite").text(
            args.verdicts
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([v.to_dict() for v in analysis.verdicts], out, indent=1, default=str)
    if args.report:
        A.build_report(spark, analysis, args.report, title="splitbrain analysis (spark-submit)")
    failed = [v.run_id for v in analysis.verdicts if v.outcome != "passed"]
    print(
        f"{len(analysis.verdicts) - len(failed)}/{len(analysis.verdicts)} run(s) passed"
        + (f"; failed: {', '.join(failed[:20])}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    code = main()
    # Stop the session before exiting so spark-submit returns promptly on a cluster.
    try:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()
    finally:
        sys.exit(code)
