"""`splitbrain mutants`: mutation testing of the checkers (harness/mutants.py) as a command.

Prints one table row per mutant (killed or survived, by which checks, after how many seeds, the
first killing seed, a crash if the simulator raised, the shrunk schedule) and one row for the
unmutated protocol over the same seeds, which must show 0 failures. Exit codes: 0 every mutant
killed and no baseline failure, 1 a mutant survived or the unmutated protocol failed somewhere,
2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

    from rich.progress import Progress

    from splitbrain.harness.mutants import BaselineResult, MutantResult

from splitbrain.node.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

# Where the description lists every hunted protocol's mutants, filled in when the help is shown:
# listing them imports every protocol, which no other command should pay for.
PLANTED = "{planted mutants}"


class _Hunted:
    """The hunted protocols as argparse choices, asked for only when argparse checks or shows them."""

    def __contains__(self, name: object) -> bool:
        from splitbrain.harness import mutants as mt

        return name in mt.hunted()

    def __iter__(self) -> Iterator[str]:
        from splitbrain.harness import mutants as mt

        return iter(mt.hunted())


class _PlantedHelp(argparse.HelpFormatter):
    def add_text(self, text: str | None) -> None:
        if text and PLANTED in text:
            from splitbrain.harness import mutants as mt

            text = text.replace(PLANTED, "; ".join(f"{p}: {', '.join(mt.mutations(p)) or 'none'}" for p in mt.hunted()))
        super().add_text(text)


def add_command(subparsers) -> None:
    from splitbrain.harness.cliargs import non_negative_int, positive_int
    from splitbrain.node import protocols

    p = subparsers.add_parser(
        "mutants",
        help="mutation testing: run every planted protocol bug against a chaos set and say which checks catch it",
        description=(
            "Run each planted protocol bug (config `mutation:`) in the simulator over a standard chaos "
            "set, seed after seed, until a check fails (the mutant is killed); shrink the killing "
            "schedule to the fewest steps that still fail the same check; run the unmutated protocol "
            "over the same seeds (it must never fail). Without SCENARIO the chaos set is generated from "
            "each seed: 3 nodes, streams both ways for 10-20 s, partitions (one-way, two-way, healed), "
            "loss, duplication, reordering, delay with jitter, typed drops, an asymmetric split with an "
            "injected view, a stale ACK past a resync (JGRP-1875), restarts and kills, admin syncs when "
            "the scenario model has them, resync modes sync and timestamp. With SCENARIO files, those "
            "files are run instead (each with seeds first-seed..first-seed+N-1); add --generated to "
            "run the generated set as well. Mutants that need one resync mode run in it. That is the "
            "default protocol's chaos set; --protocol picks another protocol's (its spec's ChaosSet): "
            "multicast streams for a multicast protocol, lossless seeds judged by xmit_traffic where the "
            "set has them. "
            f"Mutants: {PLANTED}."
        ),
        formatter_class=_PlantedHelp,
        epilog="Exit codes: 0 every mutant killed and the unmutated protocol never failed, 1 a mutant "
        "survived or the unmutated protocol failed, 2 bad input.",
    )
    p.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="scenario files to use instead of the generated chaos set (they must expect pass)",
    )
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=20,
        metavar="N",
        help="seeds per mutant (and per scenario file): the most a mutant may take to die (default 20)",
    )
    p.add_argument("--first-seed", type=non_negative_int, default=0, metavar="S", help="first seed (default 0)")
    p.add_argument(
        "--protocol",
        choices=_Hunted(),
        default=protocols.DEFAULT_PROTOCOL,
        metavar="PROTOCOL",  # argparse would list the choices at once to format {a,b,...}
        help="the protocol whose mutants are hunted, with its chaos set: one of %(choices)s (default "
        f"{protocols.DEFAULT_PROTOCOL})",
    )
    p.add_argument(
        "--mutant",
        action="append",
        default=None,
        metavar="NAME",
        help="run only this mutant (repeatable); default: every mutant",
    )
    p.add_argument("--generated", action="store_true", help="with SCENARIO files: also run the generated chaos set")
    p.add_argument(
        "--baseline",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="seeds the unmutated protocol runs (each in every resync mode a mutant used); "
        "default: the same seeds as the mutants (--seeds); 0 skips it",
    )
    p.add_argument(
        "--admin-sync",
        choices=("auto", "on", "off"),
        default="auto",
        help="admin sync steps (`sync: {at: B, peer: A}`) in the generated set's sync-mode "
        "schedules: auto (default) as soon as the scenario model has the step, on, off",
    )
    p.add_argument("--no-shrink", action="store_true", help="do not shrink the killing schedules")
    p.add_argument(
        "--no-invariants",
        action="store_true",
        help="skip check_invariants() after every simulator input (faster; a broken invariant "
        "then shows only through the checks)",
    )
    p.add_argument("--jobs", type=positive_int, default=1, metavar="J", help="worker processes (default 1)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the results as JSON to FILE")
    p.add_argument("--list", action="store_true", help="list the mutants with their descriptions and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_mutants)


def cmd_mutants(args: argparse.Namespace) -> int:
    from splitbrain.harness import mutants as mt

    planted = mt.mutations(args.protocol)
    key = mt.chaos_of(args.protocol).mode_key
    if args.list:
        if not planted:
            print(f"{args.protocol} has no planted mutants (its chaos set runs the unmutated baseline only)")
        for name, text in planted.items():
            mode = mt.mutant_mode(name, args.protocol)
            print(f"{name}{f' ({key}: {mode})' if mode else ''}: {text}")
        return EXIT_OK
    names = args.mutant or list(planted)
    unknown = [n for n in names if n not in planted]
    if unknown:
        print(
            f"splitbrain: --mutant: unknown mutant {', '.join(map(repr, unknown))} (known: {', '.join(planted)})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    sources = []
    for path in args.scenarios:
        source = _file_source(path, args.protocol)
        if source is None:
            return EXIT_BAD_INPUT
        sources.append(source)
    if args.admin_sync == "on" and not mt.admin_sync_available():
        print("splitbrain: --admin-sync on: the scenario model has no admin sync step (`sync:`) yet", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not sources or args.generated:
        admin_sync = {"auto": None, "on": True, "off": False}[args.admin_sync]
        sources.append(mt.Source("generated", admin_sync=admin_sync, protocol=args.protocol))
    if args.generated and not args.scenarios:
        print(
            "splitbrain: --generated is for use with SCENARIO files (the generated set is the default)", file=sys.stderr
        )
        return EXIT_BAD_INPUT

    seeds = range(args.first_seed, args.first_seed + args.seeds)
    base_seeds = seeds if args.baseline is None else range(args.first_seed, args.first_seed + args.baseline)
    cases = mt.baseline_scenarios(sources, base_seeds, names) if len(base_seeds) else []
    invariants = not args.no_invariants
    t0 = time.perf_counter()
    with _Progress(len(names) * len(seeds) * len(sources) + len(cases), args.quiet) as progress:
        results, baseline = _run(
            names,
            sources,
            seeds,
            cases,
            shrink=not args.no_shrink,
            invariants=invariants,
            jobs=args.jobs,
            progress=progress,
        )
    wall = time.perf_counter() - t0
    _print_table(results, baseline, seeds, sources, wall, args.protocol, key)
    if args.json:
        doc = {
            "protocol": args.protocol,
            "seeds": args.seeds,
            "first_seed": args.first_seed,
            "sources": [s.label for s in sources],
            "mutants": [r.to_dict() for r in results],
            "baseline": baseline.to_dict() if baseline is not None else None,
            "killed": sum(r.killed for r in results),
            "total": len(results),
            "wall_s": wall,
        }
        try:
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"splitbrain: --json: cannot write {args.json}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    ok = all(r.killed for r in results) and (baseline is None or not baseline.failures)
    return EXIT_OK if ok else EXIT_FAILED


def _file_source(path: str, protocol: str):
    """A scenario file as a mutants Source, or None after printing why it cannot be used."""
    import yaml

    from splitbrain.harness.cliargs import load_scenario_arg
    from splitbrain.harness.mutants import Source

    scenario = load_scenario_arg(path)
    if scenario is None:
        return None
    if scenario.expect_fail is not None:
        print(
            f"splitbrain: {path}: expect: {{fail: {scenario.expect_fail}}} reproduces a bug; mutation "
            f"testing needs scenarios that pass unmutated",
            file=sys.stderr,
        )
        return None
    if scenario.protocol != protocol:
        print(
            f"splitbrain: {path}: protocol: {scenario.protocol}, but the mutants hunted are {protocol}'s "
            f"(--protocol {scenario.protocol} hunts those)",
            file=sys.stderr,
        )
        return None
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    data.pop("expect", None)
    return Source(path, data, protocol=protocol)


def _run(names, sources, seeds, cases, *, shrink, invariants, jobs, progress):
    from splitbrain.harness import mutants as mt

    if jobs <= 1:
        results = [
            mt.hunt(n, sources, seeds, shrink_it=shrink, check_invariants=invariants, advance=progress.advance)
            for n in names
        ]
        baseline = mt.run_baseline(cases, check_invariants=invariants, advance=progress.advance) if cases else None
        return results, baseline
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    per_mutant = len(seeds) * len(sources)
    chunks = [cases[i : i + 20] for i in range(0, len(cases), 20)]
    ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures: dict[Future[Any], tuple[str, Any]] = {
            pool.submit(mt.hunt, n, sources, seeds, shrink_it=shrink, check_invariants=invariants): ("m", n)
            for n in names
        }
        futures.update(
            {pool.submit(mt.run_baseline, chunk, check_invariants=invariants): ("b", len(chunk)) for chunk in chunks}
        )
        by_name: dict[str, MutantResult] = {}
        parts: list[BaselineResult] = []
        for fut in as_completed(futures):
            kind, what = futures[fut]
            if kind == "m":
                by_name[what] = fut.result()
                progress.advance(per_mutant)
            else:
                parts.append(fut.result())
                progress.advance(what)
    baseline = None
    if cases:
        baseline = mt.BaselineResult(
            runs=sum(p.runs for p in parts),
            seeds=len({(seed, s.label) for seed, s, _ in cases}),
            failures=[f for p in parts for f in p.failures],
            wall_s=sum(p.wall_s for p in parts),
        )
        baseline.failures.sort(key=lambda f: (f["seed"], f["source"], f["resync"] or ""))
    return [by_name[n] for n in names], baseline


class _Progress:
    """A rich progress bar on stderr (nothing with --quiet or when stderr is no terminal)."""

    def __init__(self, total: int, quiet: bool):
        self.total = total
        self.quiet = quiet or not sys.stderr.isatty()
        self._progress: Progress | None = None

    def __enter__(self):
        if not self.quiet:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            progress = self._progress = Progress(
                TextColumn("mutants"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            progress.start()
            self._task = progress.add_task("runs", total=self.total)
        return self

    def advance(self, n: int) -> None:
        if self._progress is not None and n:
            self._progress.advance(self._task, n)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def _print_table(results, baseline, seeds, sources, wall: float, protocol: str, mode_key: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from splitbrain.node.protocols import DEFAULT_PROTOCOL

    console = Console(width=None if sys.stdout.isatty() else 180)
    killed = sum(r.killed for r in results)
    src = ", ".join(s.label for s in sources)
    if protocol != DEFAULT_PROTOCOL:
        src = f"{protocol}; {src}"
    table = Table(
        title=f"mutation score {killed}/{len(results)} (seeds {seeds.start}..{seeds.stop - 1}; {src})", show_lines=True
    )
    for col in (
        "mutant",
        mode_key or "mode",
        "result",
        "check(s)",
        "runs to kill",
        "first killing seed",
        "crash",
        "shrunk schedule",
    ):
        table.add_column(col, overflow="fold")
    for r in results:
        seed = (
            "-"
            if r.kill_seed is None
            else (str(r.kill_seed) if r.kill_source == "generated" else f"{r.kill_seed} ({r.kill_source})")
        )
        result = "[green]killed[/]" if r.killed else "[red]SURVIVED[/]"
        shrunk = r.shrunk or ("-" if not r.killed else "(not shrunk)")
        if r.shrunk_steps:
            shrunk = f"{r.shrunk_steps[0]} -> {r.shrunk_steps[1]} steps\n{shrunk}"
        table.add_row(
            f"{r.name}\n[dim]{r.description}[/]",
            r.resync or "any",
            result,
            ", ".join(r.checks) or "-",
            str(r.seeds_tried),
            seed,
            "[yellow]crash[/]" if r.crash else "-",
            shrunk,
        )
    if baseline is not None:
        n = len(baseline.failures)
        word = "[green]0 failures[/]" if not n else f"[red]{n} FAILURES[/]"
        first = baseline.failures[0] if n else None
        table.add_row(
            "(unmutated)\n[dim]must never fail[/]",
            "all used",
            f"{word} / {baseline.runs} runs",
            ", ".join(first["checks"] or [first["outcome"]]) if first else "-",
            str(baseline.seeds),
            str(first["seed"]) if first else "-",
            "-",
            (first["explanation"][:300] if first else "-"),
        )
    console.print(table)
    survivors = [r.name for r in results if not r.killed]
    line = f"mutation score {killed}/{len(results)}"
    if survivors:
        line += f"; survived: {', '.join(survivors)}"
    if baseline is not None:
        line += f"; unmutated: {len(baseline.failures)} failure(s) in {baseline.runs} runs"
        for f in baseline.failures[:10]:
            console.print(
                f"  unmutated failed: seed {f['seed']} ({f['source']}, {mode_key or 'mode'} {f['resync']}): "
                f"{f['outcome']} {', '.join(f['checks'])}: {f['explanation'][:200]}"
            )
    console.print(f"{line}; wall {wall:.1f} s")
