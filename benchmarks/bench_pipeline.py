"""Benchmarks of the Spark pipeline, printed as Markdown tables (and saved as JSON with --json).

1. Spark session start: a fresh Python process building the pipeline's session (local[2]) and
   running one trivial job, median of 3.
2. Events checked per second on 2 cores (local[2]) for about 1, 10 and 50 million events:
   - generated synthetically by Spark itself (spark.range -> events), as runs of ~100 k events
     (3 nodes, 6 links, sends, deliveries, acks, retransmits, final windows, a healed partition
     in the timeline; every 10th run loses one message, so checks have something to find), and
     written both as run directories of JSONL and as the pipeline's Parquet warehouse;
   - "Spark JSONL": read the JSONL files, classify every line (the exact quarantine rules), judge
     every run and compute its metrics in the per-run tasks, write the warehouse, collect the
     verdicts; "Spark Parquet": judge the runs already in the warehouse; "ingest": the JSONL pass
     alone (it judges too, since that costs less than reading the events twice);
   - "Python": harness.checks.run_checks(read_run(run)) run by run in this one process (a single
     core), the reference the pipeline must agree with; the verdicts are compared on the
     smallest size. --python-max caps the sizes the Python checker is timed on (say so in the
     table when it is skipped).
3. A campaign of N seeds (1000 by default) of a short scenario on the simulator, from start to
   HTML report, through the real CLI (`python -m harness.cli campaign`) in a fresh process: once
   writing run directories then analyzing them, once with `--master local[2]` (seeds as Spark
   tasks, logs straight into the warehouse).

Run: .venv/bin/python benchmarks/bench_pipeline.py [--quick] [--sizes 1e6,1e7,5e7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EVENTS_PER_RUN = 100_000
LINKS = (("A", "B"), ("A", "C"), ("B", "A"), ("B", "C"), ("C", "A"), ("C", "B"))
NODES = ("A", "B", "C")

SHORT_SCENARIO = """
name: bench-short
protocol: unicast3
transport: udp
nodes: [A, B]
config: {xmit_interval: 0.2}
workload:
  - {from: A, to: B, rate: 50, count: 40}
  - {from: B, to: A, rate: 20, count: 10}
schedule:
  - {at: 0.2, partition: {from: A, to: B}}
  - {at: 0.6, heal: 0}
duration: 1
settle: 1
checks: [fifo, no_duplicates, no_loss, windows_synced]
expect: pass
seed: 1
"""


# ---- synthetic data ---------------------------------------------------------------------------


def per_link_messages(events_per_run: int) -> int:
    # Per message: send + deliver, an ack pair every 10th, a retransmit every 50th: 2.22 events;
    # per run 33 fixed events (starts, views, new windows, final windows, stops).
    return max(10, round((events_per_run - 33) / (len(LINKS) * 2.22)))


def generate(spark, n_events: int, out: Path) -> dict:
    """Write ~n_events as JSONL run directories (out/runs) and as a warehouse (out/warehouse)."""
    from pyspark.sql import functions as F

    from harness.checks import CHECKS
    from pipeline import schema as S

    m = per_link_messages(min(EVENTS_PER_RUN, n_events))
    per_run = round(len(LINKS) * m * 2.22 + 33)
    runs = max(1, round(n_events / per_run))
    t_end = m * 0.01 + 2.0
    fields = [f.name for f in S.EVENT_SCHEMA_V1.fields]

    def ev(**kw):
        cols = []
        for f in S.EVENT_SCHEMA_V1.fields:
            value = kw.get(f.name)
            col = value if isinstance(value, F.Column) else F.lit(value)
            cols.append(col.cast(f.dataType).alias(f.name))
        return F.struct(*cols)

    base = spark.range(runs * len(LINKS) * m).select(
        F.expr(f"id div {len(LINKS) * m}").alias("r"),
        F.expr(f"(id div {m}) % {len(LINKS)}").alias("l"),
        (F.col("id") % m).alias("n"),
    )
    src = F.element_at(F.array(*[F.lit(x) for x, _ in LINKS]), (F.col("l") + 1).cast("int"))
    dst = F.element_at(F.array(*[F.lit(y) for _, y in LINKS]), (F.col("l") + 1).cast("int"))
    n, li, r = F.col("n"), F.col("l"), F.col("r")
    t_send = F.lit(0.05) + n * 0.01 + li * 0.0013
    t_deliver = t_send + 0.0005 + ((n * 7919 + li * 31) % 1000) * 2e-6
    app = F.concat_ws(":", src, li.cast("string"), n.cast("string"))
    conn = F.lit(1000) + li
    lost = ((r % 10) == 3) & (li == 0) & (n == F.lit(m // 2))
    msg_events = F.array(
        ev(
            v=1,
            t=t_send,
            node=src,
            proto="unicast3",
            kind="send",
            peer=dst,
            seqno=n + 1,
            conn_id=conn,
            app=app,
            bytes=100,
        ),
        F.when(
            ~lost,
            ev(
                v=1,
                t=t_deliver,
                node=dst,
                proto="unicast3",
                kind="deliver",
                peer=src,
                seqno=n + 1,
                conn_id=conn,
                app=app,
                bytes=100,
            ),
        ),
        F.when(
            n % 10 == 9,
            ev(
                v=1,
                t=t_deliver + 0.0001,
                node=dst,
                proto="unicast3",
                kind="ack_tx",
                peer=src,
                seqno=n + 1,
                conn_id=conn,
            ),
        ),
        F.when(
            n % 10 == 9,
            ev(
                v=1,
                t=t_deliver + 0.0002,
                node=src,
                proto="unicast3",
                kind="ack_rx",
                peer=dst,
                seqno=n + 1,
                conn_id=conn,
            ),
        ),
        F.when(
            n % 50 == 7,
            ev(
                v=1,
                t=t_send + 0.005,
                node=src,
                proto="unicast3",
                kind="retransmit",
                peer=dst,
                seqno=n + 1,
                conn_id=conn,
                reason="xmit",
            ),
        ),
    )
    msgs = base.select(r, F.explode(msg_events).alias("e")).where(F.col("e").isNotNull())
    fixed = []
    for node in NODES:
        fixed.append(ev(v=1, t=0.0, node=node, proto="node", kind="node_start", incarnation=0))
        fixed.append(
            ev(
                v=1,
                t=0.0,
                node=node,
                proto="unicast3",
                kind="view",
                view_id=1,
                members=F.array(*[F.lit(x) for x in NODES]),
            )
        )
        fixed.append(ev(v=1, t=t_end + 0.01, node=node, proto="node", kind="node_stop", reason="stop", incarnation=0))
    for i, (x, y) in enumerate(LINKS):
        fixed.append(
            ev(
                v=1,
                t=0.01,
                node=y,
                proto="unicast3",
                kind="conn_state",
                peer=x,
                side="recv",
                state="OPEN",
                conn_id=1000 + i,
                low=0,
                reason="new_window:first",
            )
        )
        fixed.append(
            ev(
                v=1,
                t=t_end,
                node=x,
                proto="unicast3",
                kind="window",
                peer=y,
                side="send",
                conn_id=1000 + i,
                low=m,
                high=m,
                state="OPEN",
                final=True,
            )
        )
        fixed.append(
            ev(
                v=1,
                t=t_end,
                node=y,
                proto="unicast3",
                kind="window",
                peer=x,
                side="recv",
                conn_id=1000 + i,
                low=m,
                high=m,
                state="OPEN",
                final=True,
            )
        )
    fixed.append(
        ev(
            v=1,
            t=1.0,
            node="harness",
            proto="harness",
            kind="fault_on",
            fault="partition",
            detail="#0 partition A -> B (one-way)",
            links=F.array(F.lit("A->B")),
        )
    )
    fixed.append(
        ev(
            v=1,
            t=1.5,
            node="harness",
            proto="harness",
            kind="fault_off",
            fault="partition",
            detail="#0 partition A -> B (one-way) (by #1 heal #0)",
            links=F.array(F.lit("A->B")),
        )
    )
    per_run_df = spark.range(runs).select(F.col("id").alias("r"), F.explode(F.array(*fixed)).alias("e"))
    events = msgs.unionByName(per_run_df).select(
        F.format_string("bench-%05d", F.col("r")).alias("run_id"), *[F.col("e")[f].alias(f) for f in fields]
    )
    is_h = F.col("node") == "harness"
    events = events.select(
        "*",
        F.when(is_h, F.lit("timeline.jsonl"))
        .otherwise(F.concat(F.lit("nodes/"), F.col("node"), F.lit("/events.jsonl")))
        .alias("src"),
        F.when(is_h, F.lit("1")).otherwise(F.concat(F.lit("0"), F.col("node"))).alias("file_key"),
    )
    # JSONL, one file per (run, node), lines in time order.
    tmp = out / "_jsonl"
    (
        events.select("run_id", "node", "t", F.to_json(F.struct(*fields)).alias("value"))
        .repartition("run_id", "node")
        .sortWithinPartitions("run_id", "node", "t")
        .select("run_id", "node", "value")
        .write.partitionBy("run_id", "node")
        .text(str(tmp))
    )
    for part in tmp.glob("run_id=*/node=*/part-*"):
        run_id = part.parent.parent.name.split("=", 1)[1]
        node = part.parent.name.split("=", 1)[1]
        dest = (
            out / "runs" / run_id / "timeline.jsonl"
            if node == "harness"
            else out / "runs" / run_id / "nodes" / node / "events.jsonl"
        )
        dest.parent.mkdir(parents=True, exist_ok=True)
        part.replace(dest)
    shutil.rmtree(tmp)
    # The warehouse: the same events with the line number each has in its file.
    from pyspark.sql import Window

    w = Window.partitionBy("run_id", "src").orderBy("t")
    # seq numbers a run's events in harness.eventlog.read_run's order (t, file, line).
    by_run = Window.partitionBy("run_id").orderBy("t", "file_key", "line")
    wh = out / "warehouse"
    (
        events.withColumn("line", F.row_number().over(w).cast("long"))
        .withColumn("seq", F.row_number().over(by_run).cast("long"))
        .select(*[f.name for f in S.EVENTS_TABLE_SCHEMA.fields])
        .write.partitionBy("run_id")
        .parquet(str(wh / "events"))
    )
    from datetime import datetime

    now = datetime.now(UTC).isoformat()
    rows = [
        {
            **{f.name: None for f in S.RUNS_SCHEMA.fields},
            "run_id": f"bench-{i:05d}",
            "source": "synthetic",
            "schema_version": S.EVENT_SCHEMA_VERSION,
            "checks": list(CHECKS),
            "expect": "pass",
            "event_files": 3,
            "ingested_at": now,
            "scenario": "synthetic",
            "protocol": "unicast3",
        }
        for i in range(runs)
    ]
    spark.createDataFrame(rows, S.RUNS_SCHEMA).coalesce(1).write.parquet(str(wh / "runs"))
    (wh / "_SPLITBRAIN_SCHEMA").write_text(f"splitbrain event schema v{S.EVENT_SCHEMA_VERSION}\n")
    total = spark.read.parquet(str(wh / "events")).count()
    return {"runs": runs, "events": total, "msgs_per_link": m}


# ---- measurements -----------------------------------------------------------------------------


def time_session_start(repeats: int = 3) -> float:
    code = (
        "import time,sys; sys.path.insert(0, %r); t=time.perf_counter(); "
        "from pipeline.session import get_spark; s=get_spark('local[2]'); s.range(1).count(); "
        "print(time.perf_counter()-t)"
    ) % str(ROOT)
    times = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def spark_from_parquet(spark, wh: Path) -> tuple[float, list]:
    from pipeline import analysis as A

    t = time.perf_counter()
    ids = sorted(A.I.ingested_run_ids(spark, str(wh)))
    verdicts = A.analyze_runs(spark, str(wh), ids)
    return time.perf_counter() - t, verdicts


def spark_from_jsonl(spark, runs: Path) -> tuple[float, int]:
    """Read, classify (the exact quarantine rules), judge and store the JSONL run directories in
    one pass (pipeline.ingest's per-run tasks), into a fresh warehouse next to them."""
    from pipeline import analysis as A

    wh = runs.parent / "warehouse-jsonl"
    shutil.rmtree(wh, ignore_errors=True)
    t = time.perf_counter()
    analysis = A.analyze(spark, [str(runs)], str(wh))
    took = time.perf_counter() - t
    shutil.rmtree(wh, ignore_errors=True)
    return took, len(analysis.verdicts)


def spark_ingest(spark, runs: Path, wh: Path) -> float:
    from pipeline import ingest as I

    t = time.perf_counter()
    I.ingest(spark, [str(runs)], str(wh))
    return time.perf_counter() - t


def python_checker(runs: Path) -> tuple[float, dict]:
    from harness.checks import run_checks
    from harness.eventlog import read_run

    t = time.perf_counter()
    out = {}
    for run in sorted(runs.iterdir()):
        out[run.name] = [c.to_dict() for c in run_checks(read_run(run))]
    return time.perf_counter() - t, out


def campaign(n: int, work: Path, master: str | None = None) -> dict:
    """The CLI's campaign in a fresh process: run directories then analysis, or (with `master`)
    every seed simulated and judged in a Spark task (--master)."""
    scen = work / "bench-short.yaml"
    scen.write_text(SHORT_SCENARIO)
    out = work / ("campaign" if master is None else "campaign-spark")
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "campaign",
            str(scen),
            "--runs",
            str(n),
            "--backend",
            "sim",
            "--out",
            str(out),
            "--quiet",
            *(["--master", master] if master else []),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    verdicts = json.loads((out / "report" / "verdicts.json").read_text()) if (out / "report").exists() else []
    last = [line for line in proc.stdout.splitlines() if line.startswith("campaign:")]
    return {
        "seeds": n,
        "master": master,
        "wall_s": wall,
        "exit": proc.returncode,
        "runs_judged": len(verdicts),
        "passed": sum(1 for v in verdicts if v["outcome"] == "passed"),
        "cli": last[-1] if last else "",
        "stderr_tail": proc.stderr[-500:] if proc.returncode not in (0, 1) else "",
    }


# ---- main -------------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="100 k and 1 M events, a 50-seed campaign")
    p.add_argument(
        "--sizes",
        default=None,
        help="comma-separated event counts (default 1e6,1e7,5e7; none: only the session start and the campaign)",
    )
    p.add_argument("--python-max", type=float, default=5e7, help="largest size the Python checker is timed on")
    p.add_argument("--ingest-max", type=float, default=5e7, help="largest size ingest (JSONL -> warehouse) is timed on")
    p.add_argument("--campaign", type=int, default=None, help="campaign seeds (default 1000; --quick 50; 0: none)")
    p.add_argument(
        "--standalone",
        default="",
        metavar="N,M",
        help="also run the campaign in Spark tasks on a local standalone cluster of N, M ... one-core executors",
    )
    p.add_argument("--no-rundirs", action="store_true", help="skip the campaign that writes run directories")
    p.add_argument("--work", default=None, help="scratch directory (default: a temporary one, removed)")
    p.add_argument("--driver-memory", default="8g")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    sizes_text = args.sizes or ("1e5,1e6" if args.quick else "1e6,1e7,5e7")
    sizes = [] if sizes_text == "none" else [int(float(x)) for x in sizes_text.split(",")]
    seeds = args.campaign if args.campaign is not None else (50 if args.quick else 1000)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"sizes": [], "machine": {"cpus": os.cpu_count(), "load_1m_at_start": os.getloadavg()[0]}}
    try:
        results["session_start_s"] = time_session_start()
        print(
            f"Spark session start (fresh process, local[2], median of 3): {results['session_start_s']:.2f} s",
            flush=True,
        )
        from pipeline.session import get_spark

        if sizes:
            # Warm the JVM (JIT, code generation caches) on a small run, so that the first size is
            # not charged for it; a real analysis of many runs pays this once too.
            spark = get_spark("local[2]", driver_memory=args.driver_memory, shuffle_partitions=2)
            warm = work / "warm-up"
            shutil.rmtree(warm, ignore_errors=True)
            warm.mkdir(parents=True)
            generate(spark, 20_000, warm)
            spark_from_parquet(spark, warm / "warehouse")
            spark_from_jsonl(spark, warm / "runs")
            shutil.rmtree(warm, ignore_errors=True)
            spark.stop()
        for size in sizes:
            d = work / f"size-{size}"
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            spark = get_spark(
                "local[2]", driver_memory=args.driver_memory, shuffle_partitions=2 if size <= 10_000_000 else 8
            )
            t = time.perf_counter()
            info = generate(spark, size, d)
            info["generate_s"] = time.perf_counter() - t
            print(f"generated {info['events']} events in {info['runs']} runs ({info['generate_s']:.0f} s)", flush=True)
            info["spark_parquet_s"], verdicts = spark_from_parquet(spark, d / "warehouse")
            print(f"  spark parquet {info['spark_parquet_s']:.1f} s", flush=True)
            info["spark_jsonl_s"], _ = spark_from_jsonl(spark, d / "runs")
            print(f"  spark jsonl {info['spark_jsonl_s']:.1f} s", flush=True)
            if size <= args.ingest_max:
                info["ingest_s"] = spark_ingest(spark, d / "runs", d / "warehouse2")
                print(f"  ingest {info['ingest_s']:.1f} s", flush=True)
            info["failed_runs"] = sum(1 for v in verdicts if v.outcome != "passed")
            spark.stop()
            if size <= args.python_max:
                info["python_s"], py = python_checker(d / "runs")
                print(f"  python {info['python_s']:.1f} s", flush=True)
                if size == sizes[0]:
                    info["agree"] = all(py[v.run_id] == v.checks for v in verdicts)
            results["sizes"].append(info)
            shutil.rmtree(d, ignore_errors=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
        if seeds and not args.no_rundirs:
            results["campaign"] = campaign(seeds, work)
            print(f"campaign: {results['campaign']}", flush=True)
        if seeds:
            results["campaign_spark"] = campaign(seeds, work, master="local[2]")
            print(f"campaign in Spark tasks: {results['campaign_spark']}", flush=True)
        for executors in [int(x) for x in args.standalone.split(",") if x]:
            from pipeline.standalone import standalone_cluster

            with standalone_cluster(work / f"cluster-{executors}", workers=executors, cores=1) as cluster:
                c = campaign(seeds, work, master=cluster.master)
            c["executors"] = executors
            results.setdefault("campaign_standalone", []).append(c)
            print(f"campaign on a standalone cluster, {executors} executor(s): {c}", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    results["machine"]["load_1m_at_end"] = os.getloadavg()[0]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print_tables(results)
    return 0


def print_tables(results: dict) -> None:
    print()
    print(f"Spark session start (local[2], fresh process, median of 3): {results['session_start_s']:.2f} s")
    print()
    print(
        "| events | runs | Spark JSONL s | ev/s | Spark Parquet s | ev/s | Python s | ev/s | "
        "Parquet/Python | JSONL/Python | ingest s | agree |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in results["sizes"]:
        n = s["events"]
        py = s.get("python_s")
        cells = [
            f"{n:,}",
            str(s["runs"]),
            f"{s['spark_jsonl_s']:.1f}",
            f"{n / s['spark_jsonl_s']:,.0f}",
            f"{s['spark_parquet_s']:.1f}",
            f"{n / s['spark_parquet_s']:,.0f}",
            f"{py:.1f}" if py else "not run",
            f"{n / py:,.0f}" if py else "-",
            f"{py / s['spark_parquet_s']:.2f}x" if py else "-",
            f"{py / s['spark_jsonl_s']:.2f}x" if py else "-",
            f"{s['ingest_s']:.1f}" if "ingest_s" in s else "not run",
            str(s.get("agree", "-")),
        ]
        print("| " + " | ".join(cells) + " |")
    for key, how in (("campaign", "run directories, then analysis"), ("campaign_spark", "seeds as Spark tasks")):
        c = results.get(key)
        if c:
            print()
            print(
                f"Campaign of {c['seeds']} seeds (sim, short scenario, {how}) from start to HTML report: "
                f"{c['wall_s']:.1f} s wall, exit {c['exit']}, {c['runs_judged']} runs judged, {c['passed']} passed. "
                f"{c['cli']}"
            )
    standalone = results.get("campaign_standalone", [])
    if standalone or results.get("campaign_spark"):
        print()
        print("| master | executors | seeds | wall s (start to report) | runs/min in the tasks | exit |")
        print("| --- | --- | --- | --- | --- | --- |")
        for c in [results.get("campaign_spark"), *standalone]:
            if c:
                rate = re.search(r"\(([0-9]+) runs/min\)", c["cli"])
                cells = [
                    "local[2]" if c["master"] == "local[2]" else "standalone",
                    str(c.get("executors", "2 cores")),
                    str(c["seeds"]),
                    f"{c['wall_s']:.1f}",
                    rate.group(1) if rate else "-",
                    str(c["exit"]),
                ]
                print("| " + " | ".join(cells) + " |")
    m = results["machine"]
    print(
        f"\n(machine: {m['cpus']} cpus, 1-min load average {m['load_1m_at_start']:.1f} at start, "
        f"{m.get('load_1m_at_end', 0):.1f} at end)"
    )


if __name__ == "__main__":
    sys.exit(main())
