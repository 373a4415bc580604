"""Time and peak memory to judge a long soak's log with the plain-Python checkers (harness.checks).

A synthetic run directory is written first: node A streams to node B for N messages, the log in
run lines (node/events.py, schema v2: one line per batch of `--batch` consecutive sends, and one
per batch of deliveries), with a few faults in the harness's timeline: partitions of A->B that heal
(what is sent during one is delivered after the heal, in one catch-up run) and a restart of B
between two of them. Then a fresh process reads the run directory (harness.eventlog.read_run) and
judges it with the general checks (run_checks), and reports its wall time and peak RSS
(getrusage ru_maxrss). The checkers' own memory should grow with the runs, windows and faults, not
with the messages.

Run: .venv/bin/python benchmarks/bench_judge_soak.py [--messages 1000000 10000000] [--batch 300]
     .venv/bin/python benchmarks/bench_judge_soak.py --judge RUN_DIR   (the child's part)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchresults import Results, add_json_option

RATE = 300_000.0  # messages per second of log time: the node's full rate
FAULTS = 4  # partitions of A->B over the run, each 2 s long


def _line(ev: dict) -> str:
    return json.dumps(ev, separators=(",", ":")) + "\n"


def write_soak(root: Path, messages: int, batch: int) -> tuple[int, int]:
    """Write the run directory; returns (node lines, timeline lines)."""
    (root / "nodes" / "A").mkdir(parents=True)
    (root / "nodes" / "B").mkdir(parents=True)
    duration = messages / RATE
    cuts = [(duration * (k + 1) / (FAULTS + 2), duration * (k + 1) / (FAULTS + 2) + 2.0) for k in range(FAULTS)]
    restart_at = (cuts[0][1] + cuts[1][0]) / 2 if FAULTS > 1 else None
    timeline = []
    for k, (on, off) in enumerate(cuts):
        for kind, t in (("fault_on", on), ("fault_off", off)):
            timeline.append(
                {
                    "t": t,
                    "node": "harness",
                    "proto": "harness",
                    "kind": kind,
                    "fault": "partition",
                    "links": ["A->B"],
                    "detail": f"partition A->B #{k}",
                }
            )
    lines = 0
    with open(root / "nodes" / "A" / "events.jsonl", "w") as a, open(root / "nodes" / "B" / "events.jsonl", "w") as b:
        a.write(_line({"t": 0.0, "node": "A", "proto": "node", "kind": "node_start", "incarnation": 0}))
        b.write(_line({"t": 0.0, "node": "B", "proto": "node", "kind": "node_start", "incarnation": 0}))
        lines += 2
        held: list[dict] = []  # deliveries a partition holds back until it heals
        b_incarnation = 0
        n = 0
        while n < messages:
            count = min(batch, messages - n)
            t = n / RATE
            if restart_at is not None and t >= restart_at:
                b.write(_line({"t": t, "node": "B", "proto": "node", "kind": "node_stop", "reason": "kill"}))
                b_incarnation += 1
                b.write(
                    _line({"t": t, "node": "B", "proto": "node", "kind": "node_start", "incarnation": b_incarnation})
                )
                lines += 2
                restart_at = None
            run = {
                "v": 2,
                "t": t,
                "node": "A",
                "proto": "unicast3",
                "peer": "B",
                "seqno": n + 1,
                "last_seqno": n + count,
                "app": f"A:0:{n}",
                "last_app": f"A:0:{n + count - 1}",
                "count": count,
                "bytes": 100 * count,
                "conn_id": 1,
            }
            a.write(_line({**run, "kind": "send"}))
            deliver = {**run, "kind": "deliver", "node": "B", "peer": "A", "t": t + 0.001}
            if any(on <= t < off for on, off in cuts):
                held.append(deliver)
            else:
                # After the heal, what the cut held back comes first, in order (a catch-up).
                for late in held:
                    b.write(_line({**late, "t": t + 0.0005}))
                    lines += 1
                held = []
                b.write(_line(deliver))
                lines += 1
            lines += 1  # the send
            n += count
        for late in held:
            b.write(_line({**late, "t": messages / RATE + 0.0005}))
            lines += 1
    with open(root / "timeline.jsonl", "w") as tl:
        for ev in sorted(timeline, key=lambda ev: ev["t"]):
            tl.write(_line(ev))
    return lines, len(timeline)


def judge(run_dir: str) -> dict:
    from splitbrain.harness.checks import run_checks
    from splitbrain.harness.eventlog import read_run

    t0 = time.perf_counter()
    events = read_run(run_dir)
    t1 = time.perf_counter()
    results = run_checks(events, ["fifo", "no_duplicates", "no_loss", "no_errors"], recovery_bound_s=4.5)
    t2 = time.perf_counter()
    return {
        "read_s": round(t1 - t0, 2),
        "judge_s": round(t2 - t1, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "verdicts": {r.name: ("PASS" if r.passed else "vacuous" if r.vacuous else "FAIL") for r in results},
        "no_loss": results[2].explanation[:200],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--batch", type=int, default=300, help="messages per run line (default 300)")
    parser.add_argument("--judge", metavar="RUN_DIR", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.judge:
        print(json.dumps(judge(args.judge)))
        return 0
    results_doc = Results("bench_judge_soak", argv)
    rows = []
    print("| messages | log lines | log MB | read s | judge s | peak RSS MB | verdicts |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for messages in args.messages:
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            lines, _faults = write_soak(Path(tmp), messages, args.batch)
            size = sum(p.stat().st_size for p in Path(tmp).rglob("*.jsonl")) / 1e6
            out = subprocess.run(
                [sys.executable, __file__, "--judge", tmp], check=True, capture_output=True, text=True, env=os.environ
            )
            got = json.loads(out.stdout)
        verdicts = ", ".join(f"{k} {v}" for k, v in got["verdicts"].items())
        row = [
            f"{messages:,}",
            f"{lines:,}",
            f"{size:.0f}",
            got["read_s"],
            got["judge_s"],
            got["peak_rss_mb"],
            verdicts,
        ]
        print("| " + " | ".join(map(str, row)) + " |", flush=True)
        rows.append(row)
    results_doc.table(
        "Judging a soak's log",
        ["messages", "log lines", "log MB", "read s", "judge s", "peak RSS MB", "verdicts"],
        rows,
        goal="a 100 M message soak judged in at most 2 GB peak RSS",
        note=f"A->B in run lines of {args.batch}, {FAULTS} healed partitions and a restart of B.",
    )
    results_doc.write(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
