"""The command registry (harness/commands/__init__.py): a command is a module with add(subparsers)
and one COMMANDS line; its handler's errors exit by their root (2 bad input, 1 run failed)."""

from __future__ import annotations

import pytest

from splitbrain import harness
from splitbrain.harness.cli import main
from splitbrain.harness.scenario import ScenarioError
from splitbrain.harness.sim import SimulationError


def add(subparsers) -> None:
    hello = subparsers.add_parser("hello", help="a command registered from outside the tree")
    hello.add_argument("--fail", choices=("input", "run"), default=None)
    hello.set_defaults(func=run_hello)


def run_hello(args) -> int:
    from splitbrain.harness.commands.common import EXIT_OK, error_exit

    try:
        if args.fail == "input":
            raise ScenarioError("workload[0].rate", "must be > 0")
        if args.fail == "run":
            raise SimulationError("timer livelock")
    except (ScenarioError, SimulationError) as exc:
        return error_exit(exc, where="hello.yaml: ", failed="run failed: ")
    print("hello")
    return EXIT_OK


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(harness.commands, "COMMANDS", (*harness.commands.COMMANDS, f"{__name__}:add"))


def test_every_shipped_command_is_listed(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and not line.startswith("     ")]
    assert listed == [
        "run",
        "clean",
        "doctor",
        "conformance",
        "schema",
        "protocols",
        "shrink",
        "compare",
        "analyze",
        "campaign",
        "mutants",
        "log",
        "explore",
        "node",
    ]


def test_a_registered_command_runs_and_exits_by_the_error_root(registered, capsys):
    assert main(["hello"]) == 0 and capsys.readouterr().out == "hello\n"
    assert main(["hello", "--fail", "input"]) == 2
    assert capsys.readouterr().err == "splitbrain: hello.yaml: workload[0].rate: must be > 0\n"
    assert main(["hello", "--fail", "run"]) == 1
    assert capsys.readouterr().err == "splitbrain: run failed: timer livelock\n"
