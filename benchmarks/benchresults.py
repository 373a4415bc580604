"""Benchmark results as data: each benchmark run with `--json FILE` writes its tables there, with
the machine they were measured on and the command that reproduces them. ci/docs_gen.py renders
every file of benchmarks/results/ into docs/results.md, so the results page is never typed by hand.

A benchmark either builds its tables itself (`add_json_option` and `Results`) or prints them as
Markdown and is decorated with `@recorded("bench_x", goals={...})`, which adds `--json FILE`,
keeps printing as before, and stores the printed tables with the goal each one is measured against.

A file holds:

    {"benchmark": "bench_protocol", "command": ".venv/bin/python benchmarks/bench_protocol.py",
     "machine": {"cpu": ..., "cores": 2, "load_1m": 3.1, "python": "3.11.7", "system": ...},
     "measured": "2026-12-01", "tables": [{"title": ..., "goal": ..., "headers": [...], "rows": [[...]]}]}
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import io
import json
import os
import platform
import re
import shlex
import sys
from collections.abc import Callable
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


# A note line that only repeats the load: the results page has it once per benchmark, as data.
_LOAD_NOTE = re.compile(r"^load average at the start: [\d.]+\.?$", re.IGNORECASE)


def tables_of(text: str, goals: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The Markdown tables of a benchmark's output, each titled by the `#` heading above it and
    noted with the paragraph between the two. A table's goal is the `Goal...:` line below it, else
    the entry of `goals` whose key is part of its title."""
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
            line = re.sub(r"^Code: \S+\.\s*", "", line)
            if line and not _LOAD_NOTE.match(line):
                note.append(line)
        i += 1
    for table in found:
        if not table["goal"]:
            table["goal"] = next((g for key, g in (goals or {}).items() if key in table["title"]), "")
    return found


class _Tee(io.TextIOBase):
    """Writes through to the terminal and keeps a copy to read the tables from."""

    def __init__(self, out: Any) -> None:
        self.out, self.copy = out, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def split_json(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the FILE of `--json FILE` or `--json=FILE`, the other arguments)."""
    path, rest, it = None, [], iter(argv)
    for a in it:
        if a == "--json":
            path = next(it, None)
        elif a.startswith("--json="):
            path = a.split("=", 1)[1]
        else:
            rest.append(a)
    return path, rest


Main = Callable[[list[str] | None], int | None]


def recorded(benchmark: str, goals: dict[str, str] | None = None) -> Callable[[Main], Callable[..., int]]:
    """Decorate the `main(argv)` of a benchmark that prints Markdown tables: `--json FILE` (taken off
    before its own parser sees the arguments) stores those tables, each with its goal (`goals`:
    part of a title -> what the figure is measured against), the machine and the command."""

    def wrap(main: Main) -> Callable[..., int]:
        @functools.wraps(main)
        def run(argv: list[str] | None = None) -> int:
            path, rest = split_json(list(sys.argv[1:] if argv is None else argv))
            if "-h" in rest or "--help" in rest:
                print("--json FILE: also store the printed tables, the machine and the command as JSON")
            results = Results(benchmark, rest)
            tee = _Tee(sys.stdout)
            with contextlib.redirect_stdout(tee):
                rc = main(rest) or 0
            # A benchmark that exits 1 because a goal was not met still stores what it measured.
            if path:
                results.tables = tables_of(tee.copy.getvalue(), goals)
                if not results.tables and rc:
                    return rc
                if not results.tables:
                    print(f"{benchmark}: printed no Markdown table, nothing stored", file=sys.stderr)
                    return 1
                results.write(path)
            return rc

        return run

    return wrap


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
