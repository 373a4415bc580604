"""`splitbrain run`: run a scenario on a backend and judge it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from splitbrain.harness.backends import BACKENDS
from splitbrain.harness.cliargs import load_scenario_arg, non_negative_int, positive_int
from splitbrain.harness.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    error_exit,
    interrupted,
    print_evidence,
    print_notes,
    verdict_exit,
)
from splitbrain.harness.scenario import INJECTORS
from splitbrain.node.errors import BadInput, RunFailed

DEFAULT_BACKEND = "local"


def add(subparsers) -> None:
    """The `run` command."""
    run = subparsers.add_parser(
        "run",
        help="run a scenario file and judge it",
        description="Run one scenario, write runs/<scenario>-<seed>-<stamp>/ and judge the run "
        "with the scenario's checks.",
        epilog="Exit codes: 0 outcome passed, 1 a check failed or judged nothing (or the run broke), 2 bad input.",
    )
    run.add_argument("scenario", metavar="SCENARIO", help="path of the scenario YAML file")
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default=DEFAULT_BACKEND,
        help="where the nodes run: local (one process per node on 127.X.Y.Z, real UDP/TCP; "
        "default), sim (deterministic simulator in virtual time) or docker "
        "(one container per node on a bridge network of its own; the node image is "
        "built by ci/images when missing)",
    )
    run.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="seed of the run (a non-negative integer); default: the scenario's seed",
    )
    run.add_argument(
        "--out", default="runs", metavar="DIR", help="parent directory of the run directory (default: runs)"
    )
    run.add_argument(
        "--no-invariants", action="store_true", help="sim only: skip check_invariants() after every input (faster)"
    )
    run.add_argument(
        "--wire",
        action="store_true",
        help="sim only: send frames through the real wire codec instead of passing message objects "
        "(as `wire: true` in the scenario; slower, same run for the same seed)",
    )
    run.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        metavar="N",
        help="sim only: stop with an error after N queue entries (default 20 million)",
    )
    run.add_argument("--no-progress", action="store_true", help="live backends: no progress line while the run goes")
    run.add_argument(
        "--injector",
        choices=INJECTORS,
        default=None,
        help="which injector applies network faults (overrides the scenario's `injector`): "
        "auto (docker: iptables over UDP, Toxiproxy over TCP; elsewhere in-process), "
        "inprocess (the node fault layer), iptables or toxiproxy (docker only)",
    )
    run.add_argument(
        "--keep",
        action="store_true",
        help="docker: leave the stopped containers and the network for inspection (`splitbrain clean` removes them)",
    )
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    if args.backend != "docker" and args.keep:
        print("splitbrain: --keep is for --backend docker only", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.backend != "sim" and (args.no_invariants or args.wire or args.max_steps is not None):
        flag = "--no-invariants" if args.no_invariants else "--wire" if args.wire else "--max-steps"
        print(f"splitbrain: {flag} is for --backend sim only", file=sys.stderr)
        return EXIT_BAD_INPUT
    path = Path(args.scenario)
    scenario = load_scenario_arg(args.scenario)
    if scenario is None:
        return EXIT_BAD_INPUT
    seed = scenario.seed if args.seed is None else args.seed
    from splitbrain.harness.scenario import check_backend

    try:
        check_backend(scenario, args.backend, args.injector)
    except BadInput as exc:
        return error_exit(exc, where="" if getattr(exc, "path", None) == "--injector" else f"{path}: ")
    if args.backend == "sim":
        return _run_sim(args, path, scenario, seed)
    return _run_live(args, path, scenario, seed)


def _run_sim(args, path: Path, scenario, seed: int) -> int:
    from splitbrain.harness.run import run_scenario

    # On two cores the logs are written while the run is judged (harness.afterrun).
    options: dict[str, Any] = {"check_invariants": not args.no_invariants, "workers": min(2, os.cpu_count() or 1)}
    if args.wire:
        # In the scenario itself, so that the run directory's scenario.yaml replays the same way.
        scenario = dataclasses.replace(scenario, wire=True)
    if args.max_steps is not None:
        options["max_steps"] = args.max_steps
    try:
        outcome = run_scenario(scenario, seed=seed, backend="sim", out=args.out, **options)
    except (BadInput, RunFailed) as exc:  # e.g. the protocol refused a config key; a livelock
        return error_exit(exc, where=f"{path}: ", failed=f"run failed (seed {seed}): ")
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    except Exception as exc:
        # Anything else is a bug in a layer or in the harness: keep the traceback.
        traceback.print_exc()
        print(f"splitbrain: run crashed (seed {seed}): {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED

    stats = outcome.result.stats
    verdict = outcome.verdict
    print(
        f"{scenario.name} seed={seed}: {stats['virtual_time_s']:.1f} virtual s in "
        f"{stats['wall_time_s']:.2f} s wall, {stats['msgs_sent']} msgs sent / "
        f"{stats['msgs_delivered']} delivered, {verdict.summary()}, run dir {outcome.run_dir}"
    )
    print_evidence(verdict, outcome.result.all_events)  # type: ignore[union-attr]  # sim: a SimResult
    return verdict_exit(verdict)


def _run_live(args, path: Path, scenario, seed: int) -> int:
    from splitbrain.harness.run import run_scenario

    config_error = _protocol_config_error(scenario)
    if config_error is not None:
        print(f"splitbrain: {path}: {config_error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    display = None if args.no_progress else ProgressDisplay(scenario.name, args.backend)
    from splitbrain.harness.backends import ClusterOptions

    options = ClusterOptions(injector=args.injector, keep=args.keep)
    try:
        try:
            outcome = run_scenario(
                scenario, seed=seed, backend=args.backend, out=args.out, progress=display, cluster_options=options
            )
        finally:
            if display is not None:
                display.close()
    except (BadInput, RunFailed) as exc:  # the backend cannot run here; a node crashed
        return error_exit(exc, failed=f"run failed (seed {seed}, backend {args.backend}): ")
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    except Exception as exc:
        traceback.print_exc()
        print(f"splitbrain: run crashed (seed {seed}): {type(exc).__name__}: {exc}", file=sys.stderr)
        print_notes(exc)
        return EXIT_FAILED

    stats = outcome.result.stats
    verdict = outcome.verdict
    print(
        f"{scenario.name} seed={seed}: backend {args.backend}, {stats['scenario_time_s']:.1f} s run in "
        f"{stats['wall_time_s']:.2f} s wall, {stats['msgs_sent']} msgs sent / "
        f"{stats['msgs_delivered']} delivered, {verdict.summary()}, run dir {outcome.run_dir}"
    )
    settle = stats.get("settle") or {}
    if settle and not settle.get("ok"):
        print(f"  live: {settle.get('message')}")
    if not verdict.passed or isinstance(verdict.expect, dict):
        from splitbrain.harness.eventlog import read_run

        print_evidence(verdict, lambda: read_run(outcome.run_dir))
    return verdict_exit(verdict)


def _protocol_config_error(scenario) -> str | None:
    """Validate protocol settings before starting processes, naming config.<key> like the sim."""
    import random

    from splitbrain.node import protocols
    from splitbrain.node.compose import build_stack

    if protocols.get(scenario.protocol).external:
        return None  # its settings are its own stack's, checked when its nodes start
    try:
        # With its membership: GMS's settings (fd_timeout, ...) sit in the same flat config.
        membership = getattr(scenario, "membership", "static")
        build_stack("check", scenario.protocol, dict(scenario.config), random.Random(0), 0, membership=membership)
    except ValueError as exc:
        from splitbrain.harness.sim.simulator import _config_error

        return str(_config_error(exc))
    return None


class ProgressDisplay:
    """The progress of a live run: one rich line redrawn in place on a terminal, plain lines
    (at most one every PLAIN_INTERVAL_S, plus one per applied step) otherwise."""

    PLAIN_INTERVAL_S = 2.0

    def __init__(self, name: str, backend: str, stream=None):
        self.name = name
        self.backend = backend
        self.stream = stream if stream is not None else sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._live = None
        self._last_plain = 0.0
        if self.tty:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(file=self.stream)
            self._live = Live(console=self._console, refresh_per_second=8, transient=True)
            self._live.start()

    def line(self, p) -> str:
        faults = ", ".join(p.faults) if p.faults else "none"
        odd = [f"{n} {s}" for n, s in p.nodes.items() if s != "running"]
        nodes = f" | nodes: {', '.join(odd)}" if odd else ""
        return (
            f"{self.name} [{self.backend}] {p.phase} t={p.t:5.1f}/{p.end:g}s | sent {p.sent} "
            f"delivered {p.delivered} | faults: {faults}{nodes}"
        )

    def __call__(self, p) -> None:
        text = self.line(p)
        if self._live is not None:
            from rich.text import Text

            if p.note:
                self._console.print(Text(f"  t={p.t:5.1f}s {p.note}", style="dim"))
            self._live.update(Text(text))
            return
        now = time.monotonic()
        if p.note:
            print(f"  t={p.t:5.1f}s {p.note}", file=self.stream, flush=True)
        elif now - self._last_plain >= self.PLAIN_INTERVAL_S:
            self._last_plain = now
            print(f"  {text}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
