"""Benchmarks of the Spark pipeline, printed as Markdown tables (stored as JSON with --json FILE).

1. Spark session start: a fresh Python process building the pipeline's session (local[2]) and
   running one trivial job, median of 3.
2. Events checked per second on 2 cores (local[2]) for about 1, 10 and 50 million events:
   - generated synthetically run by run with numpy and pyarrow (`synthetic_run`), as runs of
     ~100 k events (3 nodes, 6 links, sends, deliveries, acks, retransmits, final windows, a healed
     partition in the timeline; every 10th run loses one message, so checks have something to
     find), and written as the pipeline's Parquet warehouse and (unless --parquet-only) as run
     directories of JSONL;
   - "Spark JSONL": read the JSONL files, classify every line (the exact quarantine rules), judge
     every run and compute its metrics in the per-run tasks, write the warehouse, collect the
     verdicts; "Spark Parquet": judge the runs already in the warehouse; "ingest": the JSONL pass
     alone (it judges too, since that costs less than reading the events twice);
   - "Python": harness.checks.run_checks(read_run(run)) run by run in this one process (a single
     core), the reference the pipeline must agree with; the verdicts are compared on the
     smallest size. --python-max caps the sizes the Python checker is timed on (say so in the
     table when it is skipped).
3. A campaign of N seeds (1000 by default) of a short scenario on the simulator, from start to
   HTML report, through the real CLI (`python -m splitbrain.harness.cli campaign`) in a fresh process: once
   writing run directories then analyzing them, once with `--master local[2]` (seeds as Spark
   tasks, logs straight into the warehouse).

Run: .venv/bin/python benchmarks/bench_pipeline.py [--quick] [--sizes 1e6,1e7,5e7] [--json FILE]
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

from benchresults import recorded  # noqa: E402

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


def synthetic_run(r: int, m: int):
    """Run r's events as the warehouse stores them (EVENTS_TABLE_SCHEMA without run_id), built with
    numpy and pyarrow: per link, m messages sent and delivered, an ack pair every 10th, a
    retransmission every 50th; run r % 10 == 3 loses message m // 2 on the first link. Lines are
    numbered per file in time order and `seq` follows (t, file_key, line), as ingest numbers them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from splitbrain.pipeline import schema as S
    from splitbrain.pipeline import tasks as TK

    schema = TK.arrow_schema(S.EVENTS_TABLE_SCHEMA)
    blocks: list[tuple[int, dict]] = []  # (rows, column -> array or scalar)
    n = np.tile(np.arange(m, dtype=np.int64), len(LINKS))
    li = np.repeat(np.arange(len(LINKS), dtype=np.int64), m)
    src = np.array([x for x, _ in LINKS], dtype=object)[li]
    dst = np.array([y for _, y in LINKS], dtype=object)[li]
    t_send = 0.05 + n * 0.01 + li * 0.0013
    t_deliver = t_send + 0.0005 + ((n * 7919 + li * 31) % 1000) * 2e-6
    app = pc.binary_join_element_wise(
        pa.array(src, pa.string()), pc.cast(li, pa.string()), pc.cast(n, pa.string()), ":"
    )
    conn = 1000 + li
    lost = (r % 10 == 3) & (li == 0) & (n == m // 2)

    def msg(mask, t, node, peer, kind, **extra):
        idx = np.flatnonzero(mask)
        cols = {"t": t[idx], "node": node[idx], "peer": peer[idx], "kind": kind, "proto": "unicast3"}
        cols.update({"seqno": (n + 1)[idx], "conn_id": conn[idx]})
        for key, value in extra.items():
            cols[key] = (
                value.take(pa.array(idx))
                if isinstance(value, pa.Array)
                else value[idx]
                if isinstance(value, np.ndarray)
                else value
            )
        blocks.append((len(idx), cols))

    every = np.ones(len(n), dtype=bool)
    msg(every, t_send, src, dst, "send", app=app, bytes=np.full(len(n), 100))
    msg(~lost, t_deliver, dst, src, "deliver", app=app, bytes=np.full(len(n), 100))
    msg(n % 10 == 9, t_deliver + 0.0001, dst, src, "ack_tx")
    msg(n % 10 == 9, t_deliver + 0.0002, src, dst, "ack_rx")
    msg(n % 50 == 7, t_send + 0.005, src, dst, "retransmit", reason="xmit")
    t_end = m * 0.01 + 2.0
    fixed = []
    for node in NODES:
        fixed.append({"t": 0.0, "node": node, "proto": "node", "kind": "node_start", "incarnation": 0})
        fixed.append(
            {"t": 0.0, "node": node, "proto": "unicast3", "kind": "view", "view_id": 1, "members": list(NODES)}
        )
        fixed.append(
            {"t": t_end + 0.01, "node": node, "proto": "node", "kind": "node_stop", "reason": "stop", "incarnation": 0}
        )
    for i, (x, y) in enumerate(LINKS):
        c = 1000 + i
        fixed.append(
            {
                "t": 0.01,
                "node": y,
                "proto": "unicast3",
                "kind": "conn_state",
                "peer": x,
                "side": "recv",
                "state": "OPEN",
                "conn_id": c,
                "low": 0,
                "reason": "new_window:first",
            }
        )
        for node, peer, side in ((x, y, "send"), (y, x, "recv")):
            fixed.append(
                {
                    "t": t_end,
                    "node": node,
                    "proto": "unicast3",
                    "kind": "window",
                    "peer": peer,
                    "side": side,
                    "conn_id": c,
                    "low": m,
                    "high": m,
                    "state": "OPEN",
                    "final": True,
                }
            )
    for t, kind, detail in ((1.0, "fault_on", ""), (1.5, "fault_off", " (by #1 heal #0)")):
        fixed.append(
            {
                "t": t,
                "node": "harness",
                "proto": "harness",
                "kind": kind,
                "fault": "partition",
                "detail": "#0 partition A -> B (one-way)" + detail,
                "links": ["A->B"],
            }
        )
    for ev in fixed:
        blocks.append((1, {k: [v] for k, v in ev.items()}))
    columns = {}
    for f in schema:
        if f.name in ("src", "file_key", "line", "seq", "run_id"):
            continue
        parts = []
        for rows, cols in blocks:
            value = cols.get(f.name, 1 if f.name == "v" else None)
            if value is None:
                parts.append(pa.nulls(rows, f.type))
            elif isinstance(value, pa.Array):
                parts.append(value.cast(f.type))
            elif isinstance(value, (np.ndarray, list)):
                parts.append(pa.array(value, f.type))
            else:
                parts.append(
                    pa.array(
                        np.full(rows, value, dtype=object) if isinstance(value, str) else np.full(rows, value), f.type
                    )
                )
        columns[f.name] = pa.concat_arrays(parts)
    table = pa.table(columns)
    node = table.column("node").to_numpy(zero_copy_only=False)
    is_h = node == "harness"
    src_col = np.where(is_h, "timeline.jsonl", "nodes/" + node.astype(str) + "/events.jsonl").astype(object)
    fk = np.where(is_h, "1", "0" + node.astype(str)).astype(object)
    t = table.column("t").to_numpy()
    # Line numbers per file in time order (ties in block order), then seq over (t, file_key, line).
    by_file = np.lexsort((t, fk))
    line = np.empty(len(t), dtype=np.int64)
    fk_sorted = fk[by_file]
    starts = np.r_[0, np.flatnonzero(fk_sorted[1:] != fk_sorted[:-1]) + 1]
    ranks = np.arange(len(t)) - np.repeat(starts, np.diff(np.r_[starts, len(t)]))
    line[by_file] = ranks + 1
    seq = np.empty(len(t), dtype=np.int64)
    seq[np.lexsort((line, fk, t))] = np.arange(1, len(t) + 1)
    table = table.append_column("src", pa.array(src_col, pa.string()))
    table = table.append_column("file_key", pa.array(fk, pa.string()))
    table = table.append_column("line", pa.array(line))
    table = table.append_column("seq", pa.array(seq))
    # Stored in seq order, as ingest writes a run's events.
    table = table.select([f.name for f in schema if f.name != "run_id"]).sort_by("seq")
    return table.cast(pa.schema([f for f in schema if f.name != "run_id"]))


def generate(spark, n_events: int, out: Path, jsonl: bool = True) -> dict:
    """Write ~n_events as a warehouse (out/warehouse, Parquet by run) and, with `jsonl`, as JSONL
    run directories (out/runs), run by run in this process (numpy and pyarrow; the Spark-built
    generator of before took 1095 s for 10 M events)."""
    import pyarrow.parquet as pq

    from splitbrain.harness.checks import CHECKS
    from splitbrain.harness.eventlog import encode_lines
    from splitbrain.pipeline import schema as S

    m = per_link_messages(min(EVENTS_PER_RUN, n_events))
    per_run = round(len(LINKS) * m * 2.22 + 33)
    runs = max(1, round(n_events / per_run))
    wh = out / "warehouse"
    total = 0
    for r in range(runs):
        run_id = f"bench-{r:05d}"
        table = synthetic_run(r, m)
        total += table.num_rows
        part = wh / "events" / f"run_id={run_id}"
        part.mkdir(parents=True)
        pq.write_table(table, part / "part-00000.parquet")
        if jsonl:
            fields = [f.name for f in S.EVENT_SCHEMA_V1.fields]
            by_src: dict[str, list[dict]] = {}
            ordered = table.sort_by([("file_key", "ascending"), ("line", "ascending")])
            for src, row in zip(ordered.column("src").to_pylist(), ordered.select(fields).to_pylist()):
                by_src.setdefault(src, []).append({k: v for k, v in row.items() if v is not None})
            for src, evs in by_src.items():
                dest = out / "runs" / run_id / src
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(encode_lines(evs))
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
    return {"runs": runs, "events": total, "msgs_per_link": m}


# ---- measurements -----------------------------------------------------------------------------


def time_session_start(repeats: int = 3) -> float:
    code = (
        "import time,sys; sys.path.insert(0, %r); t=time.perf_counter(); "
        "from splitbrain.pipeline.session import get_spark; s=get_spark('local[2]'); s.range(1).count(); "
        "print(time.perf_counter()-t)"
    ) % str(ROOT)
    times = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def tree_cpu_s(pid: int) -> float:
    """user + sys CPU seconds of a process and its descendants (reaped ones included), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            total += sum(int(x) for x in stats[p][11:15]) / tick  # utime, stime, cutime, cstime
        todo += children.get(p, [])
    return total


def spark_cpu_s(spark) -> float:
    """CPU seconds so far of this process and the Spark JVM with its Python workers."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    own = sum(os.times()[:2])
    return own + (tree_cpu_s(proc.pid) if proc is not None else 0.0)


def spark_from_parquet(spark, wh: Path, timelines: int | None = None) -> tuple[float, list]:
    """analyze_runs of every run in the warehouse: judging alone (timelines None: no run's timeline
    drawn, not even the one per scenario the report always shows) or with `timelines`."""
    from splitbrain.pipeline import analysis as A

    t = time.perf_counter()
    ids = sorted(A.I.ingested_run_ids(spark, str(wh)))
    plans = A.I.timeline_plans
    if timelines is None:
        A.I.timeline_plans = lambda *a: {r: (n, b, False) for r, (n, b, _) in plans(*a).items()}
    try:
        verdicts = A.analyze_runs(spark, str(wh), ids, timelines=timelines or 0)
    finally:
        A.I.timeline_plans = plans
    return time.perf_counter() - t, verdicts


def verdicts_digest(verdicts: list) -> str:
    """sha256 of the verdicts as JSON (checks, advisory, outcome, metrics, ...): two trees judged
    the same runs alike when their digests are equal (the runs rows' ingest time left out)."""
    import hashlib

    docs = [v.to_dict() for v in verdicts]
    for doc in docs:
        doc["meta"] = {k: x for k, x in doc["meta"].items() if k != "ingested_at"}
    text = json.dumps(docs, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_in_process(events_per_run: int = EVENTS_PER_RUN, repeats: int = 3) -> dict:
    """One synthetic run's result document in this process, CPU seconds (best of `repeats`): from
    the stored columns (pipeline.columnar + columnar_parts), from its Parquet file as a task of
    pipeline.stored reads and judges it, and by the exact per-event path."""
    import pyarrow.parquet as pq

    from splitbrain.harness.checks import CHECKS
    from splitbrain.pipeline import columnar, columnar_parts, stored
    from splitbrain.pipeline import tasks as TK

    table = synthetic_run(3, per_link_messages(events_per_run))
    plan = (list(CHECKS), {"recovery_bound_s": 4.5, "resync_bound": None, "xmit_bound": None}, False)

    def cpu(fn) -> tuple[float, object]:
        best, out = float("inf"), None
        for _ in range(repeats):
            t = time.process_time()
            out = fn()
            best = min(best, time.process_time() - t)
        return best, out

    new_s, new_doc = cpu(lambda: TK.stored_result_document(table, plan, 0))
    old_s, old_doc = cpu(lambda: TK.result_document(TK.stored_events(table), plan, 0))
    with tempfile.TemporaryDirectory(prefix="bench-kernel-") as tmp:
        path = Path(tmp) / "part-00000.parquet"
        pq.write_table(table, path)
        run = stored.StoredRun("bench", (str(path),), (), path.stat().st_size)
        file_s, file_doc = cpu(lambda: stored.judge_run(run, plan))
    checks_s, _ = cpu(lambda: columnar.judge_table(table, plan[0], plan[1]))
    parts_s, _ = cpu(lambda: columnar_parts.parts_of_table(table))
    return {
        "events": table.num_rows,
        "columns_s": new_s,
        "events_path_s": old_s,
        "from_file_s": file_s,
        "checks_kernel_s": checks_s,
        "parts_kernel_s": parts_s,
        "identical": new_doc == old_doc == file_doc,
        "load_1m": os.getloadavg()[0],
    }


def spark_from_jsonl(spark, runs: Path) -> tuple[float, int]:
    """Read, classify (the exact quarantine rules), judge and store the JSONL run directories in
    one pass (pipeline.ingest's per-run tasks), into a fresh warehouse next to them."""
    from splitbrain.pipeline import analysis as A

    wh = runs.parent / "warehouse-jsonl"
    shutil.rmtree(wh, ignore_errors=True)
    t = time.perf_counter()
    analysis = A.analyze(spark, [str(runs)], str(wh))
    took = time.perf_counter() - t
    shutil.rmtree(wh, ignore_errors=True)
    return took, len(analysis.verdicts)


def spark_ingest(spark, runs: Path, wh: Path) -> float:
    from splitbrain.pipeline import ingest as I

    t = time.perf_counter()
    I.ingest(spark, [str(runs)], str(wh))
    return time.perf_counter() - t


def python_checker(runs: Path) -> tuple[float, dict]:
    from splitbrain.harness.checks import CHECKS, run_checks
    from splitbrain.harness.eventlog import read_run

    t = time.perf_counter()
    out = {}
    for run in sorted(runs.iterdir()):
        out[run.name] = [c.to_dict() for c in run_checks(read_run(run), list(CHECKS))]
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
            "splitbrain.harness.cli",
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


@recorded(
    "bench_pipeline",
    goals={
        "Events checked": "Spark judges millions of events per minute on two cores and agrees with the Python checkers",
        "Campaign": "a campaign of a thousand short simulated runs from start to HTML report in minutes",
    },
)
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
    p.add_argument(
        "--parquet-only",
        action="store_true",
        help="write only the warehouse and time only the judging from Parquet (no JSONL, ingest or Python checker)",
    )
    p.add_argument("--kernel", action="store_true", help="also time one run's result document in process")
    p.add_argument(
        "--timelines",
        type=int,
        default=None,
        help="judging from Parquet draws timelines as analyze_runs(timelines=N) does (default: none)",
    )
    p.add_argument("--no-session-start", action="store_true", help="do not time the session start")
    args = p.parse_args(argv)
    sizes_text = args.sizes or ("1e5,1e6" if args.quick else "1e6,1e7,5e7")
    sizes = [] if sizes_text == "none" else [int(float(x)) for x in sizes_text.split(",")]
    seeds = args.campaign if args.campaign is not None else (50 if args.quick else 1000)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"sizes": [], "machine": {"cpus": os.cpu_count(), "load_1m_at_start": os.getloadavg()[0]}}
    if args.kernel:
        results["kernel"] = kernel_in_process()
        print(f"one run's result document in process: {results['kernel']}", flush=True)
    try:
        results["session_start_s"] = time_session_start() if not args.no_session_start else None
        if results["session_start_s"] is not None:
            print(
                f"Spark session start (fresh process, local[2], median of 3): {results['session_start_s']:.2f} s",
                flush=True,
            )
        from splitbrain.pipeline.session import get_spark

        if sizes:
            # Warm the JVM (JIT, code generation caches) on a small run, so that the first size is
            # not charged for it; a real analysis of many runs pays this once too.
            spark = get_spark("local[2]", driver_memory=args.driver_memory, shuffle_partitions=2)
            warm = work / "warm-up"
            shutil.rmtree(warm, ignore_errors=True)
            warm.mkdir(parents=True)
            generate(spark, 20_000, warm, jsonl=not args.parquet_only)
            spark_from_parquet(spark, warm / "warehouse")
            if not args.parquet_only:
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
            info = generate(spark, size, d, jsonl=not args.parquet_only)
            info["generate_s"] = time.perf_counter() - t
            print(f"generated {info['events']} events in {info['runs']} runs ({info['generate_s']:.0f} s)", flush=True)
            cpu = spark_cpu_s(spark)
            info["load_1m_before_parquet"] = os.getloadavg()[0]
            info["spark_parquet_s"], verdicts = spark_from_parquet(spark, d / "warehouse", args.timelines)
            info["spark_parquet_cpu_s"] = spark_cpu_s(spark) - cpu
            info["load_1m_after_parquet"] = os.getloadavg()[0]
            info["verdicts_digest"] = verdicts_digest(verdicts)
            print(
                f"  spark parquet {info['spark_parquet_s']:.1f} s wall, {info['spark_parquet_cpu_s']:.1f} s CPU "
                f"(driver, JVM, workers; load {info['load_1m_before_parquet']:.1f} -> "
                f"{info['load_1m_after_parquet']:.1f}); verdicts sha256 {info['verdicts_digest'][:16]}",
                flush=True,
            )
            if not args.parquet_only:
                info["spark_jsonl_s"], _ = spark_from_jsonl(spark, d / "runs")
                print(f"  spark jsonl {info['spark_jsonl_s']:.1f} s", flush=True)
            if size <= args.ingest_max and not args.parquet_only:
                info["ingest_s"] = spark_ingest(spark, d / "runs", d / "warehouse2")
                print(f"  ingest {info['ingest_s']:.1f} s", flush=True)
            info["failed_runs"] = sum(1 for v in verdicts if v.outcome != "passed")
            spark.stop()
            if size <= args.python_max and not args.parquet_only:
                info["python_s"], py = python_checker(d / "runs")
                print(f"  python {info['python_s']:.1f} s", flush=True)
                if size == sizes[0]:
                    info["agree"] = all(py[v.run_id] == v.checks for v in verdicts)
            results["sizes"].append(info)
            shutil.rmtree(d, ignore_errors=True)
        if seeds and not args.no_rundirs:
            results["campaign"] = campaign(seeds, work)
            print(f"campaign: {results['campaign']}", flush=True)
        if seeds:
            results["campaign_spark"] = campaign(seeds, work, master="local[2]")
            print(f"campaign in Spark tasks: {results['campaign_spark']}", flush=True)
        for executors in [int(x) for x in args.standalone.split(",") if x]:
            from splitbrain.pipeline.standalone import standalone_cluster

            with standalone_cluster(work / f"cluster-{executors}", workers=executors, cores=1) as cluster:
                c = campaign(seeds, work, master=cluster.master)
            c["executors"] = executors
            results.setdefault("campaign_standalone", []).append(c)
            print(f"campaign on a standalone cluster, {executors} executor(s): {c}", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    results["machine"]["load_1m_at_end"] = os.getloadavg()[0]
    print_tables(results)
    return 0


def print_tables(results: dict) -> None:
    print()
    if results["session_start_s"] is not None:
        print(f"Spark session start (local[2], fresh process, median of 3): {results['session_start_s']:.2f} s")
    print()
    k = results.get("kernel")
    if k:
        print(
            f"One run's result document in process ({k['events']:,} events, CPU): "
            f"stored columns {k['columns_s']:.3f} s ({k['events'] / k['columns_s']:,.0f} ev/s per core; checks "
            f"{k['checks_kernel_s']:.3f} s, metric rows {k['parts_kernel_s']:.3f} s), read from its Parquet "
            f"file and judged {k['from_file_s']:.3f} s ({k['events'] / k['from_file_s']:,.0f} ev/s), event dicts "
            f"{k['events_path_s']:.3f} s ({k['events'] / k['events_path_s']:,.0f} ev/s), "
            f"{k['events_path_s'] / k['columns_s']:.1f}x; identical: {k['identical']}"
        )
        print()
    print("# Events checked per second (local[2])\n")
    print(
        "| events | runs | Spark JSONL s | ev/s | Spark Parquet s | ev/s | Parquet CPU s | Python s | ev/s | "
        "Parquet/Python | JSONL/Python | ingest s | agree |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in results["sizes"]:
        n = s["events"]
        py = s.get("python_s")
        jl = s.get("spark_jsonl_s")
        cells = [
            f"{n:,}",
            str(s["runs"]),
            f"{jl:.1f}" if jl else "not run",
            f"{n / jl:,.0f}" if jl else "-",
            f"{s['spark_parquet_s']:.1f}",
            f"{n / s['spark_parquet_s']:,.0f}",
            f"{s['spark_parquet_cpu_s']:.1f}",
            f"{py:.1f}" if py else "not run",
            f"{n / py:,.0f}" if py else "-",
            f"{py / s['spark_parquet_s']:.2f}x" if py else "-",
            f"{py / jl:.2f}x" if py and jl else "-",
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
        print("\n# Campaign in Spark tasks, start to report\n")
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
