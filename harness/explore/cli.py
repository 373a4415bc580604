"""`splitbrain explore`: look for failures nobody wrote a scenario for (docs/explore.md).

Exit codes: 0 the budget ran out and nothing failed, 1 something failed (each failure written as
a scenario file), 2 bad input (an unknown protocol, a bad --set or --against setting, a bad budget).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from splitbrain.harness.names import BACKENDS

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_RUNS = 200


def add_command(subparsers) -> None:
    from splitbrain.harness.cliargs import non_negative_int, positive_int

    p = subparsers.add_parser(
        "explore",
        help="search for failing fault schedules nobody wrote: random or guided, shrunk, written as scenarios",
        description=(
            "Draw fault schedules from the generic nemesis (partitions one-way and two-way, loss, "
            "duplication, reordering, delay with jitter, kills, restarts, pauses, typed drops of the "
            "protocol's message types, injected views, admin syncs where the protocol takes them) with "
            "workloads sized to each run; run them in the simulator; judge each with the protocol's "
            "checks; shrink each failure to the fewest steps that still fail the same check; write each "
            "distinct failure (by check and signature) as a scenario file that fails when run."
        ),
        epilog="Exit codes: 0 nothing failed within the budget, 1 a failure was found, 2 bad input.",
    )
    p.add_argument("--protocol", required=True, metavar="P", help="the protocol to explore (splitbrain protocols)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="settings",
        help="a protocol setting (repeatable; VALUE read as YAML: 1.0, true, sync)",
    )
    p.add_argument(
        "--faults",
        default=None,
        metavar="KIND,...",
        help="only these fault kinds (partition, loss, duplicate, reorder, delay, drop, pause, kill, restart, "
        "view, sync); default every kind the protocol allows",
    )
    p.add_argument("--nodes", type=positive_int, default=3, metavar="N", help="nodes per run (default 3)")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="sim",
        help="where runs go: sim (default), local (real processes, seconds a run; JGroups nodes run only "
        "there); docker: not yet",
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--runs", type=positive_int, default=None, metavar="N", help=f"runs (default {DEFAULT_RUNS})")
    budget.add_argument("--budget", default=None, metavar="TIME", help="wall time instead of runs: 90s, 10m, 1h")
    p.add_argument(
        "--strategy", choices=("random", "guided"), default="guided", help="search strategy (default guided)"
    )
    p.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="explorer seed (default 0)")
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        metavar="J",
        help="worker processes (default 1); on a live backend also the most clusters up at a time",
    )
    p.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="run the runs as Spark tasks on this master (local[2], spark://host:7077); same results as locally",
    )
    p.add_argument(
        "--out", default="explore-out", metavar="DIR", help="where failing scenarios go (default explore-out)"
    )
    p.add_argument(
        "--against",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="a reference setting (repeatable): a failure counts only when the same run passes with these",
    )
    p.add_argument(
        "--max-failures", type=positive_int, default=None, metavar="N", help="stop after N distinct failures"
    )
    p.add_argument("--no-shrink", action="store_true", help="write failures as found, unshrunk")
    p.add_argument(
        "--shrink-budget",
        type=positive_int,
        default=None,
        metavar="N",
        help="runs one shrink may spend (default 300 simulated; 8 live for a real implementation)",
    )
    p.add_argument("--no-invariants", action="store_true", help="skip the simulator's invariant checks (faster)")
    p.add_argument(
        "--report",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write the session's HTML report to DIR/report/ (default: when something failed)",
    )
    p.add_argument(
        "--compare-random",
        action="store_true",
        help="also run random search with the same budget (no shrinking): the report draws both behaviour curves",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_explore)


def bad(message: str) -> int:
    print(f"splitbrain: explore: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def parse_budget(text: str) -> float:
    """'90', '90s', '10m', '1h', '1.5m' -> seconds (ValueError otherwise)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"--budget: {text!r} is not a time (use 90s, 10m or 1h)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_settings(items: list[str], option: str) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option}: {item!r} is not KEY=VALUE")
        out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def cmd_explore(args: argparse.Namespace) -> int:
    from splitbrain.harness.explore.engine import Target, explore
    from splitbrain.harness.explore.vocab import vocabulary
    from splitbrain.node.errors import SettingError

    try:
        config = parse_settings(args.settings, "--set")
        against = parse_settings(args.against, "--against") if args.against is not None else None
        budget_s = parse_budget(args.budget) if args.budget is not None else None
    except ValueError as exc:
        return bad(str(exc))
    if args.backend == "docker":
        return bad(
            "--backend docker: not supported yet (explore runs on sim, or on local: real processes, "
            "JGroups nodes included)"
        )
    if args.nodes < 2:
        return bad("--nodes: at least 2 nodes")
    live = args.backend != "sim"
    try:
        external, recovery_bound = _external(args.protocol, config, against, live)
        vocab = vocabulary(args.protocol, config, args.nodes, live=live, recovery_bound_s=recovery_bound)
        if against is not None and external is None:
            vocabulary(args.protocol, {**config, **against}, args.nodes)
    except SettingError as exc:
        which = "--against" if against is not None and exc.key in against else "--set"
        return bad(f"{which} {exc.key}: {exc.message}")
    except ValueError as exc:
        return bad(f"--protocol: {exc}")
    if args.faults is not None:
        from dataclasses import replace

        from splitbrain.harness.explore.nemesis import KINDS

        only = frozenset(k.strip() for k in args.faults.split(",") if k.strip())
        unknown = sorted(only - set(KINDS))
        if unknown or not only:
            return bad(f"--faults: unknown kind(s) {', '.join(unknown) or '(none given)'} (known: {', '.join(KINDS)})")
        vocab = replace(vocab, only=only)
        from splitbrain.harness.explore.nemesis import kinds

        if not kinds(vocab):
            return bad(f"--faults: {args.protocol} with these settings allows none of {', '.join(sorted(only))}")
    problem = external is None and (
        _unsafe(args.protocol, config) or (against is not None and _unsafe(args.protocol, {**config, **against}))
    )
    if problem:
        return bad(problem)
    if live:
        problem = _live_problem(args.protocol, args.backend, external)
        if problem:
            return bad(problem)
    target = Target(
        protocol=args.protocol,
        config={} if external is not None else config,
        vocab=vocab,
        against=against,
        invariants=not args.no_invariants,
        backend=args.backend,
        external=external,
        recovery_bound=recovery_bound,
        runs_dir=str(Path(args.out) / "runs"),
    )
    runs = args.runs if args.runs is not None or budget_s is not None else DEFAULT_RUNS
    executor = None
    if args.master is not None:
        if args.jobs != 1:
            return bad("--jobs: with --master the Spark cluster runs the runs (leave --jobs out)")
        try:
            from splitbrain.harness.explore.spark import spark_executor

            executor = spark_executor(args.master)
        except Exception as exc:  # no pyspark, no Java, a master that cannot be reached
            return bad(f"--master {args.master}: cannot start a Spark session: {type(exc).__name__}: {exc}")
    from splitbrain.harness.runner import interrupt_handlers

    line = _ProgressLine(args.quiet, args.strategy, args.backend)
    with interrupt_handlers():  # SIGTERM stops the session as Ctrl-C does
        session = explore(
            target,
            strategy=args.strategy,
            seed=args.seed,
            runs=runs,
            budget_s=budget_s,
            jobs=args.jobs,
            max_findings=args.max_failures,
            shrink=not args.no_shrink,
            shrink_budget=args.shrink_budget,
            progress=line.update,
            executor=executor,
        )
        compare = None
        if args.compare_random and args.strategy == "guided" and not session.interrupted:
            line.strategy = "random"
            compare = explore(
                target,
                strategy="random",
                seed=args.seed,
                runs=session.runs,
                jobs=args.jobs,
                shrink=False,
                progress=line.update,
                executor=executor,
            )
            _forget_runs(compare)
    line.close()
    written = _write(session, args)
    if written is None:
        return EXIT_BAD_INPUT
    report = None
    if args.report or (args.report is None and session.findings):
        from splitbrain.harness.explore.report import write_report

        title = f"splitbrain explore {args.protocol} on {args.backend} ({args.strategy}, seed {args.seed})"
        report = write_report(
            session, Path(args.out), title=title, backend=args.backend, strategy=args.strategy, compare=compare
        )
    if args.json:
        doc = _document(session, args, config, against)
        doc["report"] = None if report is None else str(report)
        if compare is not None:
            doc["compare_random"] = {"runs": compare.runs, "behaviours": len(compare.seen), "curve": compare.curve}
        print(json.dumps(doc, indent=2))
    else:
        _print(session, args)
        if compare is not None:
            print(f"  random search, same budget: {len(compare.seen)} behaviours after {compare.runs} runs")
        if report is not None:
            print(f"  report: {report}")
    if session.interrupted:
        from splitbrain.harness.commands.common import EXIT_INTERRUPTED, EXIT_TERMINATED

        print(
            f"splitbrain: explore: {session.interrupted}; every cluster stopped, what was found is written",
            file=sys.stderr,
        )
        return EXIT_TERMINATED if session.interrupted == "terminated" else EXIT_INTERRUPTED
    return EXIT_FAILED if session.findings else EXIT_OK


# A real implementation's scenario block (protocol jgroups: `jgroups: {stack, jar}`) takes these
# `--set` / `--against` keys; `recovery_bound` is the bound its scenarios must state.
EXTERNAL_KEYS = ("stack", "jar")
DEFAULT_EXTERNAL_BOUND_S = 8.0


def _external(protocol: str, config: dict, against: dict | None, live: bool) -> tuple[dict | None, float | None]:
    """For a real implementation (an external protocol): its scenario block from `--set` and
    its recovery bound; (None, None) for splitbrain's own protocols. SettingError names a key
    it does not take; ValueError when the backend cannot run it."""
    from splitbrain.node import protocols
    from splitbrain.node.errors import SettingError

    if protocol not in protocols.external_names():
        return None, None
    if not live:
        raise ValueError(f"{protocol!r} runs as real nodes only: use --backend local")
    block: dict[str, Any] = {}
    bound = DEFAULT_EXTERNAL_BOUND_S
    for key, value in config.items():
        if key == "recovery_bound":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise SettingError(key, f"seconds, a positive number (got {value!r})")
            bound = float(value)
        elif key in EXTERNAL_KEYS:
            block[key] = _path_or_text(value) if key == "stack" else value
        else:
            raise SettingError(key, f"{protocol} takes only {', '.join((*EXTERNAL_KEYS, 'recovery_bound'))}")
    for key in against or {}:
        if key not in EXTERNAL_KEYS:
            raise SettingError(key, f"a {protocol} reference differs in {' or '.join(EXTERNAL_KEYS)} only")
    return block, bound


def _path_or_text(value: Any) -> Any:
    """A stack given as a file is kept as its absolute path, so the written scenario runs from anywhere."""
    path = Path(str(value))
    return str(path.resolve()) if path.is_file() else value


def _live_problem(protocol: str, backend: str, external: dict | None) -> str | None:
    """Why this host cannot run the explored nodes on `backend` (a message naming the flag), or None."""
    from splitbrain.harness.backends import get_backend

    try:
        ok, why = get_backend(backend).check()
    except Exception as exc:  # a backend that cannot even be made here
        ok, why = False, f"{type(exc).__name__}: {exc}"
    if not ok:
        return f"--backend {backend}: {why}"
    if external is not None:
        from splitbrain.node.jgroups.launch import runtime_problem

        missing = runtime_problem(external.get("jar"))
        if missing:
            return f"--protocol {protocol}: {missing}"
    return None


def _forget_runs(session) -> None:
    """The comparison's failing live runs are not findings: their run directories go."""
    import shutil

    for f in session.findings:
        if f.run_dir:
            shutil.rmtree(f.run_dir, ignore_errors=True)


def _unsafe(protocol: str, config: dict) -> str | None:
    """Settings the protocol calls unsafe with in-process drops (the explorer drops in process)."""
    from splitbrain.node import protocols

    problems = protocols.get(protocol).unsafe_settings(config, "udp", True)
    if problems:
        key, why = problems[0]
        return f"--set {key}: {why}"
    return None


def _write(session, args) -> list[str] | None:
    from splitbrain.harness.shrink import dump_scenario

    if not session.findings:
        return []
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"splitbrain: explore: --out: cannot create {out}: {exc}", file=sys.stderr)
        return None
    paths = []
    for f in session.findings:
        path = out / f"{f.scenario['name']}.yaml"
        sets = "".join(f" --set {k}={v}" for k, v in parse_settings(args.settings, "--set").items())
        against = "".join(f" --against {a}" for a in args.against or ())
        shape = (f" --faults {args.faults}" if args.faults else "") + (
            f" --nodes {args.nodes}" if args.nodes != 3 else ""
        )
        head = (
            f"# Found by `splitbrain explore --protocol {args.protocol}{sets}{against}{shape} "
            f"{' --backend ' + args.backend if args.backend != 'sim' else ''} "
            f"--strategy {args.strategy} --seed {args.seed}` (run {f.run}, seed {f.seed}),\n"
            f"# shrunk from {f.steps_before} to {f.steps_after} steps ({f.shrink_runs} runs). It fails "
            f"{f.check} when run:\n#   {_rerun(path, args.backend)}\n"
        )
        if f.explanation:
            head += f"# As found: {f.explanation[:300]}\n"
        f.yaml = head + dump_scenario(f.scenario)
        path.write_text(f.yaml, encoding="utf-8")
        f.path = str(path)
        paths.append(str(path))
    return paths


def _rerun(path: Path, backend: str) -> str:
    from splitbrain.harness.explore.engine import rerun_command

    return rerun_command(str(path), backend)


def _document(session, args, config, against) -> dict:
    return {
        "protocol": args.protocol,
        "config": config,
        "against": against,
        "faults": sorted(args.faults.split(",")) if args.faults else None,
        "nodes": args.nodes,
        "backend": args.backend,
        "strategy": args.strategy,
        "seed": args.seed,
        "runs": session.runs,
        "wall_s": round(session.wall_s, 3),
        "runs_per_s": round(session.runs / max(session.wall_s, 1e-9), 2),
        "failed_runs": session.failed_runs,
        "behaviours": len(session.seen),
        "corpus": session.corpus,
        "first_failure": None
        if session.first_failure is None
        else {"runs": session.first_failure[0], "wall_s": round(session.first_failure[1], 3)},
        "duplicates": session.duplicates,
        "errors": session.errors,
        "interrupted": session.interrupted,
        "seconds_per_run": round(session.run_wall_s / max(session.runs, 1), 3),
        "failures": [f.to_dict() for f in session.findings],
        "curve": session.curve,
    }


def _print(session, args) -> None:
    rate = session.runs / max(session.wall_s, 1e-9)
    print(
        f"explore {args.protocol} ({args.strategy}, seed {args.seed}): {session.runs} runs in {session.wall_s:.1f} s "
        f"({rate:.1f} runs/s), {len(session.seen)} behaviours, {session.failed_runs} failed run(s), "
        f"{len(session.findings)} distinct failure(s)"
    )
    for f in session.findings:
        print(f"  {f.check} [{f.signature}] run {f.run}: {f.steps_before} -> {f.steps_after} steps: {f.path}")
        print(f"    rerun: {_rerun(Path(f.path or ''), args.backend)}")


class _ProgressLine:
    """One line on stderr, rewritten in place on a terminal, every few seconds otherwise."""

    def __init__(self, quiet: bool, strategy: str, backend: str = "sim") -> None:
        self.quiet, self.strategy, self.backend = quiet, strategy, backend
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.shown = False

    def update(self, session, rate: float) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if now - self.last < (5.0 if not self.tty else 0.0 if self.backend == "sim" else 0.5):
            return
        self.last = now
        if self.backend == "sim":
            pace = f"{rate:.1f} runs/s"
        else:
            # Live runs take seconds each: say how many clusters are up and what a run costs.
            per_run = f"{session.run_wall_s / session.runs:.1f} s/run" if session.runs else "first runs"
            pace = f"{session.running} running, {per_run}, {session.wall_s:.0f} s"
            if session.errors:
                pace += f", {session.errors} not judged"
        text = (
            f"explore {self.strategy} on {self.backend}: {session.runs + session.finishing} runs, {pace}, "
            f"{len(session.findings)} failure(s), {len(session.seen)} behaviours"
        )
        sys.stderr.write(f"\r{text}\x1b[K" if self.tty else text + "\n")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            sys.stderr.write("\n")
