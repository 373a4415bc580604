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
