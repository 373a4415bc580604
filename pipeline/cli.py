"""`splitbrain analyze` and `splitbrain campaign`: the pipeline's commands for harness/cli.py.

    splitbrain analyze RUN_DIR... [--master URL] [--out DIR]
    splitbrain campaign SCENARIO --runs N [--backend sim|local|docker] [--out DIR] [--master URL]

harness/cli.py calls `add_commands(subparsers)`; each command's handler (`cmd_analyze`,
`cmd_campaign`) takes the parsed arguments and returns the exit code: 0 every run passed, 1 some
run failed (or errored), 2 bad input (a path that is no run directory, a bad scenario, a backend
that is not available), with a message naming what was wrong.

Output of both: <out>/warehouse (Parquet: events, quarantine, runs), <out>/report/index.html
(plots) and <out>/report/verdicts.json. A campaign also writes its runs to <out>/runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from splitbrain.harness.cliargs import load_scenario_arg, non_negative_int, positive_int
from splitbrain.node.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput


def add_commands(subparsers) -> None:
    """Register `analyze` and `campaign` on an argparse subparsers object."""
    from splitbrain.harness.checks import GENERAL_CHECKS, KNOWN_CHECKS

    analyze = subparsers.add_parser(
        "analyze",
        help="judge run directories with the Spark pipeline and write an HTML report",
        description="Ingest run directories (or directories of them; local paths or any Hadoop URI) "
        "into a Parquet warehouse, judge every run by its scenario's checks (no_errors always) "
        f"(any of {', '.join(KNOWN_CHECKS)}; a run without a scenario by {', '.join(GENERAL_CHECKS)}), "
        "flag stuck retransmission as advisory, compute metrics and write an HTML report.",
        epilog="Exit codes: 0 every run passed, 1 a run failed, 2 bad input.",
    )
    analyze.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="a run directory, or a directory holding run directories"
    )
    analyze.add_argument(
        "--out", default="analysis", metavar="DIR", help="output directory: warehouse/ and report/ (default: analysis)"
    )
    _spark_options(analyze)
    analyze.set_defaults(func=cmd_analyze)

    campaign = subparsers.add_parser(
        "campaign",
        help="run a scenario with many seeds, then analyze the runs",
        description="Run SCENARIO with N consecutive seeds (starting at the scenario's seed, or "
        "--first-seed) on a backend, with a progress bar, then analyze every run with "
        "the Spark pipeline and write one HTML report for the campaign.",
        epilog="Exit codes: 0 every run passed, 1 a run failed, 2 bad input.",
    )
    campaign.add_argument("scenario", metavar="SCENARIO", help="path of the scenario YAML file")
    campaign.add_argument("--runs", type=positive_int, required=True, metavar="N", help="number of seeds to run")
    campaign.add_argument(
        "--backend", choices=("sim", "local", "docker"), default="sim", help="where the nodes run (default: sim)"
    )
    campaign.add_argument(
        "--first-seed",
        type=non_negative_int,
        default=None,
        metavar="S",
        help="first seed (default: the scenario's seed)",
    )
    campaign.add_argument(
        "--out", default=None, metavar="DIR", help="output directory (default: campaigns/<scenario>-<UTC stamp>)"
    )
    campaign.add_argument(
        "--no-invariants", action="store_true", help="sim only: skip check_invariants() after every input (faster)"
    )
    _spark_options(campaign)
    campaign.set_defaults(func=cmd_campaign)


def _spark_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master", default=None, metavar="URL", help="Spark master (default local[*]; e.g. spark://host:7077, yarn)"
    )
    parser.add_argument(
        "--timelines",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="at most N run timelines in the report (default 24: failing runs first)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress output")


# ---- analyze ----------------------------------------------------------------------------------


def cmd_analyze(args: argparse.Namespace) -> int:
    out = Path(args.out)
    return _analyze(
        args.run_dirs,
        out,
        master=args.master,
        title=f"splitbrain analysis: {', '.join(args.run_dirs)}",
        timelines=args.timelines,
        quiet=args.quiet,
    )


def _analyze(
    paths: list[str],
    out: Path,
    *,
    master: str | None,
    title: str,
    timelines: int | None,
    quiet: bool,
    only: list[str] | None = None,
    extra: dict | None = None,
) -> int:
    from rich.console import Console

    # Progress goes to stderr; the verdict table to stdout, wide enough for run ids when piped.
    console = Console(stderr=True, quiet=quiet)
    missing = [p for p in paths if not _is_uri(p) and not Path(p).exists()]
    if missing:
        print(f"splitbrain: no such run directory: {', '.join(missing)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    t0 = time.perf_counter()
    with console.status("starting Spark, judging on the driver meanwhile") as status:
        from splitbrain.pipeline import analysis as A
        from splitbrain.pipeline import overlap

        limit = 24 if timelines is None else timelines
        started = overlap.start(paths, master, only, limit)
        spark = started.session.get()
        try:
            status.update("ingesting run directories")
            result = A.ingest_only(
                spark,
                paths,
                str(out / "warehouse"),
                only=only,
                timelines=limit,
                prejudged=started.prejudged,
                now=started.now,
                background=True,  # the report is drawn while the rows are written
            )
            try:
                status.update(f"checking {len(result.run_ids)} run(s)")
                analysis = A.analyze_ingested(spark, result, timelines=limit)
                status.update("writing the report")
                extra = dict(extra or {})
                extra["analysis wall time (s)"] = round(time.perf_counter() - t0, 1)
                page = A.build_report(
                    spark, analysis, str(out / "report"), title=title, extra=extra, max_timelines=timelines
                )
            finally:
                result.wait()
        except BadInput as exc:  # e.g. clashing run ids
            print(f"splitbrain: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return _print_verdicts(console, analysis, page)


def _print_verdicts(console, analysis, page) -> int:
    from rich.console import Console
    from rich.table import Table

    out = Console(width=None if Console().is_terminal else 160, quiet=console.quiet)

    verdicts = analysis.verdicts
    table = Table(title=f"{len(verdicts)} run(s)", show_lines=False)
    for col in ("run", "outcome", "failed checks", "advisory", "quarantined", "harness"):
        table.add_column(col, overflow="fold")
    shown = [v for v in verdicts if v.outcome != "passed"][:50] or verdicts[:20]
    for v in shown:
        adv = ", ".join(c["name"] for c in v.advisory if not c["passed"])
        style = {"passed": "green", "vacuous": "yellow"}.get(v.outcome, "red")
        table.add_row(
            v.run_id,
            f"[{style}]{v.outcome}[/{style}]",
            ", ".join(c["name"] for c in v.deciding) or "",
            adv,
            str(v.quarantined or ""),
            v.harness_outcome or "",
        )
    out.print(table)
    failed = [v for v in verdicts if v.outcome != "passed"]
    for v in failed[:10]:
        for c in v.deciding or []:
            state = "vacuous" if c.get("vacuous") else "failed"
            print(f"  {v.run_id}: {c['name']} {state}: {c['explanation']}")
        if v.error:
            print(f"  {v.run_id}: error: {v.error}")
    ing = analysis.ingest
    quarantined = sum(v.quarantined for v in verdicts)
    print(
        f"{len(verdicts) - len(failed)}/{len(verdicts)} run(s) passed"
        + (f", {quarantined} line(s) quarantined" if quarantined else "")
        + (f" ({len(ing.skipped)} already in the warehouse)" if ing and ing.skipped else "")
        + f"; report: {page}"
    )
    return EXIT_FAILED if failed else EXIT_OK


# ---- campaign ---------------------------------------------------------------------------------


def cmd_campaign(args: argparse.Namespace) -> int:
    scenario = load_scenario_arg(args.scenario)
    if scenario is None:
        return EXIT_BAD_INPUT
    if args.no_invariants and args.backend != "sim":
        print("splitbrain: --no-invariants is for --backend sim only", file=sys.stderr)
        return EXIT_BAD_INPUT
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    out = Path(args.out) if args.out else Path("campaigns") / f"{scenario.name}-{stamp}"
    runs_dir = out / "runs"
    first = scenario.seed if args.first_seed is None else args.first_seed
    seeds = range(first, first + args.runs)
    t0 = time.perf_counter()
    if args.backend == "sim" and args.master:
        return _campaign_in_spark(scenario, seeds, out, args, t0)
    code, run_ids, counts = _run_seeds(
        scenario,
        seeds,
        args.backend,
        runs_dir,
        {"check_invariants": False} if args.no_invariants else {},
        quiet=args.quiet,
    )
    if code is not None:
        return code
    run_wall = time.perf_counter() - t0
    extra = {
        "scenario": scenario.name,
        "backend": args.backend,
        "seeds": f"{seeds.start}..{seeds.stop - 1}",
        "runs wall time (s)": round(run_wall, 1),
        **{f"harness {k}": v for k, v in counts.items()},
    }
    code = _analyze(
        [str(runs_dir)],
        out,
        master=args.master,
        only=run_ids,
        extra=extra,
        quiet=args.quiet,
        title=f"splitbrain campaign: {scenario.name} x {args.runs} ({args.backend})",
        timelines=args.timelines,
    )
    if code in (EXIT_OK, EXIT_FAILED):
        print(f"campaign: {args.runs} run(s) in {run_wall:.1f} s, total {time.perf_counter() - t0:.1f} s")
    return code


def _campaign_in_spark(scenario, seeds: range, out: Path, args: argparse.Namespace, t0: float) -> int:
    """`--backend sim --master URL`: every seed simulated and judged in a Spark task, its logs
    written straight into the warehouse (pipeline.campaign), analysis and report in the same
    session. No run directories are written."""
    from rich.console import Console

    console = Console(stderr=True, quiet=args.quiet)
    limit = 24 if args.timelines is None else args.timelines
    with console.status("starting Spark") as status:
        from splitbrain.pipeline import analysis as A
        from splitbrain.pipeline import campaign as CP
        from splitbrain.pipeline.session import get_spark, ship_code

        spark = get_spark(args.master, jit=CP.DRIVER_JIT)
        ship_code(spark)
        try:
            status.update(f"simulating and judging {len(seeds)} seed(s) in Spark tasks")
            t1 = time.perf_counter()
            result = CP.run_campaign(
                spark,
                scenario,
                seeds,
                str(out / "warehouse"),
                sim_options={"check_invariants": False} if args.no_invariants else {},
                timelines=limit,
            )
            run_wall = time.perf_counter() - t1
            analysis = A.analyze_ingested(spark, result, timelines=limit)
            harness = {"passed": 0, "failed": 0, "vacuous": 0, "error": 0}
            for meta in result.metas.values():
                key = meta.get("harness_outcome") or "error"
                harness[key] = harness.get(key, 0) + 1
            extra = {
                "scenario": scenario.name,
                "backend": "sim (Spark tasks)",
                "master": args.master,
                "seeds": f"{seeds.start}..{seeds.stop - 1}",
                "runs + judging wall time (s)": round(run_wall, 1),
                "runs per minute": round(len(seeds) / run_wall * 60) if run_wall > 0 else None,
                **{f"harness {k}": v for k, v in harness.items() if v},
                "analysis wall time (s)": round(time.perf_counter() - t0, 1),
            }
            status.update("writing the report")
            page = A.build_report(
                spark,
                analysis,
                str(out / "report"),
                title=f"splitbrain campaign: {scenario.name} x {len(seeds)} (sim in Spark tasks)",
                extra=extra,
                max_timelines=limit,
            )
        except BadInput as exc:  # e.g. clashing run ids
            print(f"splitbrain: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    code = _print_verdicts(console, analysis, page)
    print(
        f"campaign: {len(seeds)} run(s) simulated and judged in Spark tasks in {run_wall:.1f} s "
        f"({len(seeds) / max(run_wall, 1e-9) * 60:.0f} runs/min), total {time.perf_counter() - t0:.1f} s"
    )
    return code


def _run_seeds(scenario, seeds: range, backend: str, runs_dir: Path, sim_options: dict, *, quiet: bool):
    """Run every seed; returns (exit code if the campaign cannot go on, run ids, outcome counts)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from splitbrain.harness.run import run_scenario
    from splitbrain.harness.scenario import ScenarioError

    counts = {"passed": 0, "failed": 0, "error": 0}
    run_ids: list[str] = []
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[tally]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False, disable=quiet) as progress:
        task = progress.add_task(f"{scenario.name} on {backend}", total=len(seeds), tally="")
        for seed in seeds:
            try:
                outcome = run_scenario(scenario, seed=seed, backend=backend, out=runs_dir, **sim_options)
                run_ids.append(outcome.run_dir.name)
                counts[outcome.verdict.outcome] = counts.get(outcome.verdict.outcome, 0) + 1
            except BadInput as exc:  # a scenario field; a backend this host cannot run
                progress.stop()
                where = f"{scenario.name}: " if isinstance(exc, ScenarioError) else ""
                print(f"splitbrain: {where}{exc}", file=sys.stderr)
                return EXIT_BAD_INPUT, run_ids, counts
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # the run directory holds what exists and verdict "error"
                counts["error"] += 1
                note = next((n for n in getattr(exc, "__notes__", ()) if "run directory" in n), "")
                if note:
                    run_ids.append(Path(note.split(":", 1)[1].strip()).name)
                progress.console.print(f"[red]seed {seed}: {type(exc).__name__}: {exc}[/red]")
            progress.update(
                task,
                advance=1,
                tally=f"[green]{counts['passed']} passed[/green] [red]{counts['failed']} failed"
                f"[/red]" + (f" {counts['error']} errors" if counts["error"] else ""),
            )
    return None, run_ids, counts


# ---- paths ---------------------------------------------------------------------------------


def _is_uri(path: str) -> bool:
    """s3a://..., hdfs://..., file:/... (checked by ingest); a plain path is checked here."""
    from splitbrain.pipeline.ingest import normalize_uri

    return normalize_uri(path) == path.rstrip("/") and not path.startswith("/") and ":" in path


if __name__ == "__main__":  # pragma: no cover
    from splitbrain.harness.cli import main

    sys.exit(main())
