"""Writing and judging a finished simulation on two processes (harness.afterrun).

The forked path must give the very results and files of the one-process path, for passing runs
and for the museum's failing ones, and a child that fails must fail the run as the one-process
path would have.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from splitbrain.harness import afterrun
from splitbrain.harness.afterrun import ChildFailed, write_and_check
from splitbrain.harness.checks import run_checks
from splitbrain.harness.cli import main
from splitbrain.harness.run import run_scenario
from splitbrain.harness.rundir import write_events
from splitbrain.harness.scenario import load_scenario
from splitbrain.harness.sim import Simulation

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "scenarios" / "bugs").glob("*.yaml"))


@pytest.fixture
def always_fork(monkeypatch):
    """Fork for runs of any size (the shipped scenarios are below MIN_EVENTS)."""
    monkeypatch.setattr(afterrun, "MIN_EVENTS", 0)


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*.jsonl"))}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_two_processes_give_the_results_and_files_of_one(path, tmp_path, always_fork):
    """Each shipped scenario, passing or reproducing a bug: the same check results, in the same
    order, and byte-identical logs whether one process or two write and judge."""
    scenario = load_scenario(path)
    result = Simulation(scenario, scenario.seed).run()
    events = result.all_events()
    out = {}
    for workers in (1, 2):
        run_dir = tmp_path / str(workers)

        def write(d=run_dir):
            write_events(d, result.events, result.timeline)
            (d / "writer.pid").write_text(str(os.getpid()))

        out[workers] = write_and_check(write, events, scenario, workers=workers)
        assert [r.name for r in out[workers]] == list(scenario.checks)
    assert (tmp_path / "1" / "writer.pid").read_text() == str(os.getpid())
    assert (tmp_path / "2" / "writer.pid").read_text() != str(os.getpid()), "the child did not write"
    assert out[2] == out[1]
    assert out[1] == run_checks(
        events,
        list(scenario.checks),
        recovery_bound_s=scenario.recovery_bound,
        resync_bound=scenario.resync_bound,
        xmit_bound=scenario.xmit_bound,
    )
    assert _files(tmp_path / "2") == _files(tmp_path / "1")


class _NeedsTwo(Exception):
    def __init__(self, a, b):  # pickled with its args, ("first second",): one argument too few
        super().__init__(f"{a} {b}")


def _scenario():
    return load_scenario(ROOT / "scenarios" / "steady.yaml")


def _events(scenario):
    return Simulation(scenario, scenario.seed).run().all_events()


def test_a_write_that_raises_in_the_child_raises_here(always_fork):
    """The child's exception comes back as itself, with the child's traceback in a note."""
    scenario = _scenario()

    def write():
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left") as caught:
        write_and_check(write, _events(scenario), scenario, workers=2)
    assert any("in the process writing the event logs" in note for note in caught.value.__notes__)


def test_an_exception_that_cannot_be_pickled_is_reported_with_its_text(always_fork):
    """An exception the child cannot send back becomes ChildFailed carrying its traceback."""
    scenario = _scenario()

    class Local(Exception):  # a local class does not pickle
        pass

    def write():
        raise Local("odd failure")

    with pytest.raises(ChildFailed, match="odd failure"):
        write_and_check(write, _events(scenario), scenario, workers=2)


def test_an_exception_that_does_not_unpickle_is_reported_with_its_text(always_fork):
    """An exception that pickles but cannot be rebuilt here becomes ChildFailed with its text."""
    scenario = _scenario()

    def write():
        raise _NeedsTwo("first", "second")

    with pytest.raises(ChildFailed, match="NeedsTwo"):
        write_and_check(write, _events(scenario), scenario, workers=2)


def test_no_fork_while_other_threads_run(always_fork):
    """With another thread running the work stays in this process (a fork copies one thread)."""
    scenario = _scenario()
    pids = []
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        write_and_check(lambda: pids.append(os.getpid()), _events(scenario), scenario, workers=2)
    finally:
        stop.set()
        other.join()
    assert pids == [os.getpid()]


def test_a_child_that_dies_fails_the_run(always_fork):
    """A child killed before it answers is ChildFailed naming the signal, never a silent pass."""
    scenario = _scenario()

    def write():
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(ChildFailed, match=f"killed by signal {int(signal.SIGKILL)}"):
        write_and_check(write, _events(scenario), scenario, workers=2)


def test_run_scenario_with_two_workers_writes_the_same_run_directory(tmp_path, always_fork):
    """run_scenario(workers=2): the same logs and verdict.json (but the wall time) as workers=1."""
    scenario = load_scenario(ROOT / "scenarios" / "lossy-link.yaml")
    one = run_scenario(scenario, out=tmp_path / "one", stamp="20240101T000000")
    two = run_scenario(scenario, out=tmp_path / "two", stamp="20240101T000000", workers=2)
    assert _files(two.run_dir) == _files(one.run_dir)

    def verdict_text(run_dir: Path) -> list[str]:
        return [line for line in (run_dir / "verdict.json").read_text().splitlines() if "wall_time_s" not in line]

    assert verdict_text(two.run_dir) == verdict_text(one.run_dir)
    assert two.verdict.checks == one.verdict.checks


def test_cli_run_whose_writer_fails_exits_1_with_an_error_verdict(tmp_path, monkeypatch, capsys, always_fork):
    """A child that fails makes `splitbrain run` fail as a failed write did in one process: exit 1,
    an error verdict, the traceback."""

    from splitbrain import harness

    def broken(*args, **kwargs):
        if os.getpid() != parent:
            raise OSError(5, "Input/output error")
        return real(*args, **kwargs)  # the one-process rewrite of what exists, after the error

    parent, real = os.getpid(), harness.rundir.write_events
    monkeypatch.setattr(harness.rundir, "write_events", broken)
    code = main(["run", str(ROOT / "scenarios" / "steady.yaml"), "--backend", "sim", "--out", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert "run crashed" in err and "Input/output error" in err
    (run_dir,) = tmp_path.iterdir()
    assert '"outcome": "error"' in (run_dir / "verdict.json").read_text()
    assert (run_dir / "nodes" / "A" / "events.jsonl").read_text()
