"""Benchmark results as data: each benchmark run with `--json FILE` writes its tables there, with
the machine they were measured on and the command that reproduces them. ci/docs_gen.py renders
every file of benchmarks/results/ into docs/results.md, so the results page is never typed by hand.

A file holds:

    {"benchmark": "bench_protocol", "command": ".venv/bin/python benchmarks/bench_protocol.py",
     "machine": {"cpu": ..., "cores": 2, "load_1m": 3.1, "python": "3.11.7", "system": ...},
     "measured": "2026-12-01", "tables": [{"title": ..., "goal": ..., "headers": [...], "rows": [[...]]}]}
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import sys
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What the figures were measured on: CPU model, cores, 1-minute load when the run started."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_1m": round(load, 1) if load is not None else None,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.machine()}",
    }


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write the tables, the machine and this command as JSON (benchmarks/results/ feeds docs/results.md)",
    )


class Results:
    """The tables one benchmark run produced; `write` stores them with the machine."""

    def __init__(self, benchmark: str, argv: list[str] | None = None) -> None:
        self.benchmark = benchmark
        args = [a for a in (sys.argv[1:] if argv is None else argv)]
        # The command without --json FILE: what a reader runs to measure the same figures.
        clean: list[str] = []
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a == "--json":
                skip = True
                continue
            if a.startswith("--json="):
                continue
            clean.append(a)
        self.command = shlex.join([".venv/bin/python", f"benchmarks/{benchmark}.py", *clean])
        # The command that measures the same figures again and stores them where these came from.
        self.record = shlex.join(
            [".venv/bin/python", f"benchmarks/{benchmark}.py", *clean, "--json", f"benchmarks/results/{benchmark}.json"]
        )
        self.machine = machine()  # the load before the benchmark loads the machine itself
        self.tables: list[dict[str, Any]] = []

    def table(self, title: str, headers: list[str], rows: list[list[Any]], goal: str = "", note: str = "") -> None:
        self.tables.append(
            {
                "title": title,
                "goal": goal,
                "note": note,
                "headers": [str(h) for h in headers],
                "rows": [[_plain(c) for c in row] for row in rows],
            }
        )

    def document(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "command": self.command,
            "record": self.record,
            "machine": self.machine,
            "measured": dt.date.today().isoformat(),
            "tables": self.tables,
        }

    def write(self, path: str | os.PathLike[str] | None) -> None:
        if not path:
            return
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.document(), indent=1) + "\n")
        print(f"results: {path}", file=sys.stderr)


def _plain(cell: Any) -> Any:
    return cell if isinstance(cell, int | float | str) or cell is None else str(cell)


# ---- any benchmark that prints Markdown tables ----------------------------------------------


def tables_of(text: str) -> list[dict[str, Any]]:
    """The Markdown tables of a benchmark's output, each titled by the `#` heading above it and
    noted with the paragraph between the two."""
    found: list[dict[str, Any]] = []
    title, note = "", []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            title, note = line.lstrip("#").strip(), []
        elif (
            line.startswith("|")
            and i + 1 < len(lines)
            and set(lines[i + 1].strip()) <= set("|-: ")
            and "-" in lines[i + 1]
        ):
            headers = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            rows = [r for r in rows if len(r) == len(headers)]
            if rows:
                found.append(
                    {"title": title or "results", "goal": "", "note": " ".join(note), "headers": headers, "rows": rows}
                )
            continue
        elif line.startswith("Goal") and found and found[-1]["title"] == (title or "results"):
            found[-1]["goal"] = line.split(":", 1)[1].strip() if ":" in line else line  # the verdict below a table
        elif line:
            # "Code: <checkout path>." names the tree measured: the checkout itself, not data.
            note.append(re.sub(r"^Code: \S+\.\s*", "", line))
        i += 1
    return found


def main(argv: list[str] | None = None) -> int:
    """Run a benchmark that prints Markdown tables and store them as JSON with the machine:
    `python benchmarks/benchresults.py --json FILE benchmarks/bench_speed.py --sections sim`."""
    import subprocess

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--json", required=True, metavar="FILE")
    parser.add_argument("script", help="the benchmark script, e.g. benchmarks/bench_speed.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args(argv)
    name = Path(args.script).stem
    results = Results(name, args.args)
    results.record = shlex.join(
        [".venv/bin/python", "benchmarks/benchresults.py", "--json", f"benchmarks/results/{name}.json", args.script]
        + args.args
    )
    proc = subprocess.run([sys.executable, args.script, *args.args], stdout=subprocess.PIPE, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        return proc.returncode
    results.tables = tables_of(proc.stdout)
    if not results.tables:
        print(f"benchresults: {args.script} printed no Markdown table", file=sys.stderr)
        return 1
    results.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
