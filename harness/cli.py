"""The `splitbrain` command line: run scenarios, check the machine, run a node daemon, print the
JSON Schema of scenario files.

Exit codes (DESIGN.md): 0 the outcome passed, 1 a check failed or judged nothing (its name and
explanation are printed) or the run itself failed, 2 bad input (a scenario field, a missing file, a bad flag).
An interrupted run (Ctrl-C) tears its nodes down, writes what exists and exits 130 (143 for
SIGTERM).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.cliargs import load_scenario_arg, non_negative_int, positive_int

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM
DEFAULT_BACKEND = "local"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="splitbrain",
        description="A chaos lab for reliable-delivery protocols: run fault scenarios against "
        "the registered protocols and check ordering, loss, duplicates and window sync.",
        epilog="Exit codes: 0 outcome passed, 1 a check failed or judged nothing (vacuous), 2 bad input.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run",
        help="run a scenario file and judge it",
        description="Run one scenario, write runs/<scenario>-<seed>-<stamp>/ and judge the run "
        "with the scenario's checks.",
        epilog="Exit codes: 0 outcome passed, 1 a check failed or judged nothing (or the run broke), 2 bad input.",
    )
    run.add_argument("scenario", metavar="SCENARIO", help="path of the scenario YAML file")
    run.add_argument(
        "--backend",
        choices=("sim", "local", "docker"),
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
        choices=("auto", "inprocess", "iptables", "toxiproxy"),
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

    clean = sub.add_parser(
        "clean",
        help="remove containers and networks that docker runs left behind",
        description="Remove the containers and networks labelled splitbrain.cluster=<id> whose harness "
        "process is gone (a run killed with -9, --keep, --splitbrain-keep). Clusters whose "
        "owner still runs on this host are kept unless --all.",
        epilog="Exit codes: 0 done (or nothing to do), 1 something could not be removed, 2 no engine.",
    )
    clean.add_argument(
        "--all", action="store_true", help="also remove clusters whose owner still runs (or runs on another host)"
    )
    clean.add_argument("--cluster", metavar="ID", default=None, help="remove only this cluster (sb<8 hex>)")
    clean.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    clean.set_defaults(func=cmd_clean)

    doctor = sub.add_parser(
        "doctor",
        help="report what this machine can run",
        description="Report the Python version, which backends can run here and which network "
        "fault tools (iptables, tc netem, toxiproxy-server) are present, and whether IP multicast "
        "works here; each line says why not.",
        epilog="Always exits 0: it reports, it does not judge.",
    )
    doctor.set_defaults(func=cmd_doctor)

    conformance = sub.add_parser(
        "conformance",
        help="run the node contract's conformance suite against a node implementation",
        description="Start two nodes of an implementation on loopback and check every rule of the "
        "node contract (docs/node-contract.md): the admin API against node/contract/openapi.yaml, "
        "the token, errors, a stream's delivery, the event log against "
        "node/contract/events.schema.json, and that a kill -9 loses at most 100 ms of events.",
        epilog="Exit codes: 0 every rule kept, 1 a rule broken (each one is named), 2 the nodes "
        "could not start or bad arguments.",
    )
    which = conformance.add_mutually_exclusive_group(required=True)
    which.add_argument("--impl", choices=("python", "jgroups"), help="a built-in implementation")
    which.add_argument(
        "--node-command",
        metavar="CMD",
        help="the command that starts one node, with {config} for its configuration file, "
        'e.g. "./mynode --config {config}"',
    )
    conformance.add_argument(
        "--extra",
        metavar="JSON",
        default="{}",
        help="configuration keys your node needs besides the contract's, as a JSON object",
    )
    conformance.add_argument("--bind-host", default="127.0.0.1", help="the host nodes bind their protocol socket to")
    conformance.set_defaults(func=cmd_conformance)

    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of scenario files",
        description="Print the JSON Schema (draft 2020-12) of scenario files, for editors and other "
        "tools; `splitbrain run` checks more than a schema can say (node names, the "
        "schedule as a whole) and names the field of every problem.",
        epilog="Always exits 0.",
    )
    schema.set_defaults(func=cmd_schema)

    protocols_cmd = sub.add_parser(
        "protocols",
        help="list the registered protocols: settings and defaults, message types, event kinds, mutants",
        description="List every protocol the registry knows (node/protocols.py, plus the spec modules named "
        "in SPLITBRAIN_PROTOCOLS), with its settings and their defaults, message types, own "
        "event kinds, default checks and planted mutants.",
        epilog="Exit codes: 0 (every command exits 2 when a module named in SPLITBRAIN_PROTOCOLS cannot be loaded).",
    )
    protocols_cmd.add_argument("--json", action="store_true", help="print JSON instead of text")
    protocols_cmd.set_defaults(func=cmd_protocols)

    shrink = sub.add_parser(
        "shrink",
        help="shrink a failing scenario to the smallest schedule that still fails the same check",
        description="Run SCENARIO in the simulator; if a check fails (for `expect: {fail: X}`, check X), "
        "greedily drop schedule steps and streams, halve stream counts, durations and rates and the run's "
        "duration and settle, keeping each change after which the same check still fails with the same "
        "seed (and, for a scenario with `config.mutation`, passes without it). Writes the result as a "
        "scenario file `splitbrain run` accepts and prints the before/after sizes.",
        epilog="Exit codes: 0 shrunk and written, 1 the run crashed, 2 bad input or the scenario fails no check.",
    )
    shrink.add_argument("scenario", metavar="SCENARIO", help="path of the scenario YAML file")
    shrink.add_argument(
        "--seed", type=non_negative_int, default=None, metavar="N", help="seed (default: the scenario's seed)"
    )
    shrink.add_argument(
        "--backend", choices=("sim",), default="sim", help="where candidates run: sim only (deterministic, fast)"
    )
    shrink.add_argument(
        "--out", default=None, metavar="FILE", help="where to write the shrunk scenario (default: <name>-shrunk.yaml)"
    )
    shrink.add_argument(
        "--budget", type=positive_int, default=None, metavar="N", help="most simulator runs to spend (default 300)"
    )
    shrink.add_argument("--quiet", action="store_true", help="no progress lines, only the result")
    shrink.set_defaults(func=cmd_shrink)

    compare = sub.add_parser(
        "compare",
        help="run scenarios on every registered protocol variant and print a table",
        description="Run each SCENARIO (default: every file of scenarios/bugs/, the bug museum) in the "
        "simulator with seeds 1..N on every registered protocol that delivers the way the scenario's protocol "
        "does (point-to-point or multicast) and each of its variants (the values of "
        "its variant setting, e.g. a resync mode), judged as `expect: pass`, and print per scenario and "
        "variant: pass rate, resync messages and bytes, time from the last heal to windows in sync, "
        "retransmissions (means per run).",
        epilog="Exit codes: 0 table printed, 2 bad input.",
    )
    compare.add_argument(
        "scenarios", metavar="SCENARIO", nargs="*", help="scenario files (default: scenarios/bugs/*.yaml)"
    )
    compare.add_argument("--seeds", type=positive_int, default=10, metavar="N", help="seeds 1..N per cell (default 10)")
    compare.add_argument("--jobs", type=positive_int, default=1, metavar="J", help="worker processes (default 1)")
    compare.add_argument("--json", default=None, metavar="FILE", help="also write the table as JSON")
    compare.add_argument("--quiet", action="store_true", help="no progress lines")
    compare.set_defaults(func=cmd_compare)

    # analyze and campaign: the Spark pipeline (pipeline/cli.py imports pyspark only when run).
    from pipeline.cli import add_commands as add_pipeline_commands

    add_pipeline_commands(sub)

    # mutants: mutation testing of the checkers (harness/mutants_cli.py).
    from harness.mutants_cli import add_command as add_mutants_command

    add_mutants_command(sub, positive_int, non_negative_int)

    # `splitbrain node ARGS` hands ARGS to the daemon untouched (main() does it before argparse),
    # so `splitbrain node --help` is the daemon's own help. This entry only lists the command.
    sub.add_parser(
        "node",
        help="run one protocol node daemon: same as `python -m node` (try `splitbrain node --help`)",
        add_help=False,
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        return _main(list(argv))
    rc = _main(sys.argv[1:])
    # The command is done and the process ends here (the console script, `python -m`): what it
    # leaves is garbage in reference cycles (a simulation's layers refer to each other and hold
    # every event), which the collector would free object by object at exit, 0.15 s after a
    # 258k-event run. Frozen, it is left to the OS; atexit hooks still run.
    gc.freeze()
    return rc


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "node":
        return cmd_node(argv[1:])
    from node.protocols import RegistryError, check_extras

    try:
        check_extras()  # a bad SPLITBRAIN_PROTOCOLS is bad input, said once, before anything runs
    except RegistryError as exc:
        print(f"splitbrain: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse exits 2 on a bad flag, naming it
    try:
        return args.func(args)
    except KeyboardInterrupt as exc:  # before a run started (loading modules, the scenario)
        return _interrupted(exc)


# ---- commands ---------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from harness.scenario import ScenarioError

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
    from harness.scenario import check_backend

    try:
        check_backend(scenario, args.backend, args.injector)
    except ScenarioError as exc:
        where = "" if exc.path == "--injector" else f"{path}: "
        print(f"splitbrain: {where}{exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.backend == "sim":
        return _run_sim(args, path, scenario, seed)
    return _run_live(args, path, scenario, seed)


def _run_sim(args, path: Path, scenario, seed: int) -> int:
    from harness.rundir import run_scenario
    from harness.scenario import ScenarioError
    from harness.sim import SimulationError

    # On two cores the logs are written while the run is judged (harness.afterrun).
    options: dict[str, Any] = {"check_invariants": not args.no_invariants, "workers": min(2, os.cpu_count() or 1)}
    if args.wire:
        # In the scenario itself, so that the run directory's scenario.yaml replays the same way.
        scenario = dataclasses.replace(scenario, wire=True)
    if args.max_steps is not None:
        options["max_steps"] = args.max_steps
    try:
        outcome = run_scenario(scenario, seed=seed, backend="sim", out=args.out, **options)
    except ScenarioError as exc:  # e.g. the protocol refused a config key
        print(f"splitbrain: {path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SimulationError as exc:
        print(f"splitbrain: run failed (seed {seed}): {exc}", file=sys.stderr)
        _print_notes(exc)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
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
    _print_evidence(verdict, outcome.result.all_events)  # type: ignore[union-attr]  # sim: a SimResult
    return _verdict_exit(verdict)


def _print_evidence(verdict, events: Callable[[], list[dict]]) -> None:
    """For a reproduced bug, the failure it expected; for any failure or reproduction, what the
    protocol kept doing at the end and the final windows (harness/evidence.py). `events` gives the
    merged log: it is read only when there is something to show (merging a big run costs)."""
    if verdict.passed and not isinstance(verdict.expect, dict):
        return
    if verdict.passed:
        for check in verdict.checks:
            if check.name == verdict.expect["fail"]:
                print(f"  {check.name} failed (as expected): {check.explanation}")
    from harness.evidence import evidence_lines

    for line in evidence_lines(events()):
        print(f"  evidence: {line}")


def _run_live(args, path: Path, scenario, seed: int) -> int:
    from harness.backends import BackendError, BackendUnavailable
    from harness.rundir import run_scenario
    from harness.runner import RunError

    config_error = _protocol_config_error(scenario)
    if config_error is not None:
        print(f"splitbrain: {path}: {config_error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    display = None if args.no_progress else ProgressDisplay(scenario.name, args.backend)
    from harness.backends import ClusterOptions

    options = ClusterOptions(injector=args.injector, keep=args.keep)
    try:
        try:
            outcome = run_scenario(
                scenario, seed=seed, backend=args.backend, out=args.out, progress=display, cluster_options=options
            )
        finally:
            if display is not None:
                display.close()
    except BackendUnavailable as exc:
        print(f"splitbrain: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except (BackendError, RunError) as exc:
        print(f"splitbrain: run failed (seed {seed}, backend {args.backend}): {exc}", file=sys.stderr)
        _print_notes(exc)
        return EXIT_FAILED
    except Exception as exc:
        traceback.print_exc()
        print(f"splitbrain: run crashed (seed {seed}): {type(exc).__name__}: {exc}", file=sys.stderr)
        _print_notes(exc)
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
        from harness.eventlog import read_run

        _print_evidence(verdict, lambda: read_run(outcome.run_dir))
    return _verdict_exit(verdict)


def cmd_shrink(args: argparse.Namespace) -> int:
    import yaml

    from harness.shrink import DEFAULT_BUDGET, NothingToShrink, shrink_scenario, to_yaml

    path = Path(args.scenario)
    scenario = load_scenario_arg(args.scenario)
    if scenario is None:
        return EXIT_BAD_INPUT
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    seed = scenario.seed if args.seed is None else args.seed
    out = Path(args.out) if args.out else Path(f"{scenario.name}-shrunk.yaml")

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"  {line}", flush=True)

    try:
        result = shrink_scenario(data, seed, budget=args.budget or DEFAULT_BUDGET, progress=progress)
    except NothingToShrink as exc:
        print(f"splitbrain: {path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except Exception as exc:
        traceback.print_exc()
        print(f"splitbrain: shrink crashed (seed {seed}): {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    out.write_text(to_yaml(result, str(path), seed), encoding="utf-8")
    b, a = result.before, result.after
    print(
        f"{scenario.name} seed={seed}: {result.check} still fails after {result.runs} runs; "
        f"steps {b['steps']} -> {a['steps']}, streams {b['streams']} -> {a['streams']}, "
        f"messages {b['messages']} -> {a['messages']}, duration {b['duration']:g} -> {a['duration']:g} s, "
        f"settle {b['settle']:g} -> {a['settle']:g} s; written to {out}"
    )
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    import yaml

    from harness.compare import compare, markdown

    paths = [Path(p) for p in args.scenarios] or sorted(Path("scenarios/bugs").glob("*.yaml"))
    if not paths:
        print("splitbrain: no scenario files (and no scenarios/bugs/*.yaml here)", file=sys.stderr)
        return EXIT_BAD_INPUT
    files = []
    for path in paths:
        scenario = load_scenario_arg(str(path))
        if scenario is None:
            return EXIT_BAD_INPUT
        files.append((scenario.name, yaml.safe_load(path.read_text(encoding="utf-8"))))

    def advance(line: str) -> None:
        if not args.quiet:
            print(f"  {line}", file=sys.stderr, flush=True)

    try:
        vs, table = compare(files, range(1, args.seeds + 1), jobs=args.jobs, advance=advance)
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    print(f"seeds 1..{args.seeds} per cell, simulator, every run judged as expect: pass")
    print(markdown(vs, table))
    if args.json:
        rows = {name: {label: cell.row() for label, cell in row.items()} for name, row in table.items()}
        Path(args.json).write_text(json.dumps({"seeds": args.seeds, "table": rows}, indent=2) + "\n")
    return EXIT_OK


def _verdict_exit(verdict) -> int:
    if verdict.passed:
        return EXIT_OK
    for check in verdict.failures:
        state = "passed" if check.passed else "vacuous" if check.vacuous else "failed"
        print(f"  {check.name} {state}: {check.explanation}")
    return EXIT_FAILED


def _interrupted(exc: KeyboardInterrupt) -> int:
    from harness.runner import Terminated

    what = "terminated" if isinstance(exc, Terminated) else "interrupted"
    started = any("run directory" in note for note in getattr(exc, "__notes__", ()))
    print(f"splitbrain: {what}" + ("; every node stopped, what exists is written" if started else ""), file=sys.stderr)
    _print_notes(exc)
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


def _protocol_config_error(scenario) -> str | None:
    """Validate protocol settings before starting processes, naming config.<key> like the sim."""
    try:
        from node.compose import build_stack
    except ImportError:  # pragma: no cover
        return None
    import random

    from node import protocols

    if protocols.get(scenario.protocol).external:
        return None  # its settings are its own stack's, checked when its nodes start
    try:
        # With its membership: GMS's settings (fd_timeout, ...) sit in the same flat config.
        membership = getattr(scenario, "membership", "static")
        build_stack("check", scenario.protocol, dict(scenario.config), random.Random(0), 0, membership=membership)
    except ValueError as exc:
        from harness.sim.simulator import _config_error

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


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from harness.scenario import json_schema

    print(json.dumps(json_schema(), indent=2))
    return EXIT_OK


def cmd_protocols(args: argparse.Namespace) -> int:
    import json

    from harness.scenario import MEMBERSHIP_DEFAULT_CHECKS
    from node import protocols

    # The reliable protocols (a scenario's `protocol:`), then the membership protocols (its
    # `membership:`, which run around a reliable one).
    specs = [protocols.get(name) for name in (*protocols.names(), *protocols.membership_names())]
    info: list[dict[str, Any]] = [
        {
            "name": spec.name,
            "summary": spec.summary,
            "multicast": spec.multicast,
            "membership": spec.membership,
            "settings": spec.config({}).as_dict(),
            "message_types": list(spec.message_types),
            "event_kinds": dict(spec.event_kinds),
            # A membership protocol's checks are added to the reliable protocol's defaults.
            "default_checks": list(spec.default_checks or (MEMBERSHIP_DEFAULT_CHECKS if spec.membership else ())),
            "mutations": dict(spec.mutations),
            "regressions": dict(spec.regressions),
        }
        for spec in specs
    ]
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    for p in info:
        kind = " (multicast)" if p["multicast"] else f" (membership: {p['name']})" if p["membership"] else ""
        print(f"{p['name']}: {p['summary']}{kind}")
        print("  settings: " + ", ".join(f"{k}={v}" for k, v in p["settings"].items()))
        print("  message types: " + ", ".join(p["message_types"]))
        print("  event kinds: " + (", ".join(p["event_kinds"]) or "(core kinds only)"))
        print("  default checks: " + ", ".join(p["default_checks"]))
        print(f"  mutants: {len(p['mutations'])}" + (f" ({', '.join(p['mutations'])})" if p["mutations"] else ""))
        if p["regressions"]:
            print(f"  regressions (old code for the bug museum): {', '.join(p['regressions'])}")
    return EXIT_OK


def cmd_conformance(args: argparse.Namespace) -> int:
    import json
    import shlex

    from harness.conformance import Implementation, StartError, jgroups_node, python_node, run_suite

    if args.impl == "python":
        impl = python_node()
    elif args.impl == "jgroups":
        from node.jgroups.launch import runtime_problem

        why = runtime_problem()
        if why:
            print(f"splitbrain: {why}", file=sys.stderr)
            return EXIT_BAD_INPUT
        impl = jgroups_node()
    else:
        try:
            extra = json.loads(args.extra)
        except ValueError as exc:
            print(f"splitbrain: --extra: not JSON: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if not isinstance(extra, dict):
            print("splitbrain: --extra: expected a JSON object", file=sys.stderr)
            return EXIT_BAD_INPUT
        command = tuple(shlex.split(args.node_command))
        if not any("{config}" in part for part in command):
            print("splitbrain: --node-command: needs {config} where the configuration file goes", file=sys.stderr)
            return EXIT_BAD_INPUT
        impl = Implementation("your node", command, extra, host=args.bind_host)
    try:
        report = run_suite(impl)
    except StartError as exc:
        print(f"splitbrain: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(report.text())
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_doctor(args: argparse.Namespace) -> int:
    print(f"python: {platform.python_version()} ({sys.executable})")
    for name, (ok, why) in doctor_report().items():
        print(f"{name}: {'yes' if ok is True else ok if isinstance(ok, str) else 'no'} ({why})")
    return EXIT_OK


def doctor_report() -> dict[str, tuple[bool | str, str]]:
    """What this machine can run: name -> (yes/no or a word, why)."""
    report: dict[str, tuple[bool | str, str]] = {}
    missing = [m for m in ("node.compose", "node.wire", "node.faultlayer", "harness.checks") if not _importable(m)]
    report["backend sim"] = (
        (True, "in-process simulator") if not missing else (False, f"missing modules: {', '.join(missing)}")
    )
    from harness.backends.local import LocalBackend

    report["backend local"] = LocalBackend().check()
    report["backend docker"] = _docker_backend_status()
    report["iptables"] = _iptables_status()
    report["tc netem"] = _netem_status()
    toxi = shutil.which("toxiproxy-server")
    report["toxiproxy-server"] = (
        (True, toxi) if toxi else (False, "not on PATH (Toxiproxy is TCP-only; the in-process fault layer covers UDP)")
    )
    report["spark pipeline"] = _spark_status()
    report["protocols"] = _protocols_status()
    from harness.mcastprobe import ip_multicast_status

    report["ip multicast"] = ip_multicast_status()
    report["jgroups"] = _jgroups_status()
    return report


def _jgroups_status() -> tuple[bool | str, str]:
    """JGroups nodes (protocol: jgroups) need the JGroups jar and a JDK (javac builds the node)."""
    from node.jgroups.launch import DEFAULT_JAR, runtime_problem

    why = runtime_problem()
    if why:
        return False, why
    return True, f"{DEFAULT_JAR} and javac found (protocol: jgroups runs on --backend local)"


def _protocols_status() -> tuple[bool | str, str]:
    """The registered protocols (a scenario's `protocol:`), the membership protocols (its
    `membership:`), and those planned but not built."""
    from node.protocols import PLANNED, RegistryError, membership_names, names

    try:
        known = names()
        membership = membership_names()
    except RegistryError as exc:
        return False, str(exc)
    planned = f"; planned: {', '.join(PLANNED)}" if PLANNED else ""
    listed = ", ".join(known) + (f"; membership: static, {', '.join(membership)}" if membership else "")
    return listed, f"registered, `splitbrain protocols` lists their settings{planned}"


def _spark_status() -> tuple[bool, str]:
    """analyze/campaign need pyspark (the `pipeline` extra) and a Java runtime for its JVM."""
    try:
        import pyspark
    except ImportError:
        return False, "pyspark not installed (pip install 'splitbrain[pipeline]')"
    java = (
        shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin"))
        if os.environ.get("JAVA_HOME")
        else shutil.which("java")
    )
    if not java:
        return False, f"pyspark {pyspark.__version__}, but no java on PATH or in JAVA_HOME (Spark 4 needs Java 17+)"
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
        version = (proc.stderr or proc.stdout).splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
        return False, f"pyspark {pyspark.__version__}, but {java} -version failed: {exc}"
    return True, f"pyspark {pyspark.__version__}, {version} ({java})"


def _docker_backend_status() -> tuple[bool, str]:
    try:
        from harness.backends.docker import DockerBackend
    except ImportError:
        return False, _docker_status()
    ok, why = DockerBackend().check()
    if ok:
        runner = DockerBackend().iptables_runner
        why += f"; iptables faults via {'nsenter' if runner == 'nsenter' else 'docker exec -u root'}"
    return ok, why


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove leftover containers and networks of docker clusters (by label)."""
    try:
        import docker

        from harness.backends.docker import clean_leftovers

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:  # no SDK, no engine
        print(f"splitbrain: cannot reach a Docker engine: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    removed, problems = clean_leftovers(client, everything=args.all, cluster=args.cluster, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"splitbrain clean: {verb} {removed} cluster(s)")
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return EXIT_FAILED if problems else EXIT_OK


def _docker_status() -> str:
    try:
        import docker
    except ImportError:
        sdk = "docker SDK (python package docker) not installed"
    else:
        try:
            client = docker.from_env(timeout=5)
            client.ping()
            version = client.version().get("Version", "?")
            client.close()
            return f"docker SDK installed, engine {version} reachable"
        except Exception as exc:  # the SDK raises several kinds for an absent engine
            return f"docker SDK installed, engine not reachable ({type(exc).__name__}: {str(exc)[:120]})"
    cli = shutil.which("docker")
    sock = Path("/var/run/docker.sock")
    engine = f"engine socket {sock} {'present' if sock.exists() else 'absent'}"
    return f"{sdk}; docker CLI {'at ' + cli if cli else 'not on PATH'}; {engine}"


def _iptables_status() -> tuple[bool, str]:
    path = shutil.which("iptables")
    if not path:
        return False, "iptables not on PATH"
    try:
        proc = subprocess.run([path, "-S"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{path} does not run: {exc}"
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()[:1] or [f"exit {proc.returncode}"]
        return False, f"{path} present but not usable here: {why[0]}"
    return True, f"{path}, rules readable"


def _netem_status() -> tuple[bool, str]:
    """tc netem needs the sch_netem qdisc: loaded, loadable as a module, or built in."""
    tc = shutil.which("tc")
    if not tc:
        return False, "tc (iproute2) not on PATH"
    release = platform.release()
    reasons = []
    try:
        modules = Path("/proc/modules").read_text()
    except OSError:
        modules = ""
    if any(line.split(" ", 1)[0] == "sch_netem" for line in modules.splitlines()):
        return True, f"{tc}, sch_netem loaded"
    reasons.append("sch_netem not loaded (/proc/modules)")
    moddir = Path("/lib/modules") / release
    if moddir.is_dir():
        builtin = moddir / "modules.builtin"
        try:
            if "sch_netem.ko" in builtin.read_text():
                return True, f"{tc}, sch_netem built into kernel {release}"
        except OSError:
            pass
        found = [p for p in moddir.rglob("sch_netem.ko*")][:1]
        if found:
            return True, f"{tc}, sch_netem module at {found[0]} (loads on first use)"
        reasons.append(f"no sch_netem under {moddir}")
    else:
        reasons.append(f"{moddir} does not exist")
    modprobe = shutil.which("modprobe")
    if modprobe:
        try:
            proc = subprocess.run([modprobe, "-n", "sch_netem"], capture_output=True, text=True, timeout=10)
            if proc.returncode == 0:
                return True, f"{tc}, `modprobe -n sch_netem` succeeds"
            why = (proc.stderr or proc.stdout).strip().splitlines()[:1] or [f"exit {proc.returncode}"]
            reasons.append(f"`modprobe -n sch_netem`: {why[0]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"`modprobe -n sch_netem` failed: {exc}")
    else:
        reasons.append("modprobe not on PATH")
    return False, f"{tc} present, but the kernel has no netem: " + "; ".join(reasons)


def cmd_node(argv: list[str]) -> int:
    """Run the node daemon in this process (`splitbrain node ARGS` = `python -m node ARGS`)."""
    try:
        from node.runtime.runner import main as node_main
    except ImportError as exc:
        print(f"splitbrain: the node daemon is not available ({exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return node_main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_BAD_INPUT)


# ---- helpers ----------------------------------------------------------------------------------


def _print_notes(exc: BaseException) -> None:
    for note in getattr(exc, "__notes__", ()):
        print(f"  {note}", file=sys.stderr)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
