"""Ctrl-C (SIGINT) and SIGTERM during a `splitbrain run` on the local backend.

The run is a subprocess, as a user would start it; the test waits (polling, with a deadline) until
every node has said it is up, then signals the harness. The harness must stop every node, write
the run directory with what exists and an "error" verdict, and exit 130 (143 for SIGTERM).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.testlib import eventually
from tests.leaks import processes_naming

pytestmark = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0


def wait_for(predicate, what: str, proc: subprocess.Popen, timeout_s: float = DEADLINE_S):
    def check():
        if proc.poll() is not None:  # not "not yet": eventually lets anything but AssertionError through
            out, err = proc.communicate()
            raise RuntimeError(f"splitbrain exited ({proc.returncode}) before {what}:\n{out}\n{err}")
        return predicate()

    eventually(check, timeout=timeout_s, interval=0.05, what=what)


def all_nodes_up(out: Path, names: str) -> bool:
    logs = list(out.glob("*/nodes/*/node.log"))
    up = {p.parent.name for p in logs if '"ready": true' in p.read_text(errors="replace")}
    return up == set(names)


def all_nodes_delivered(out: Path, names: str) -> bool:
    logs = list(out.glob("*/nodes/*/events-inc1.jsonl"))
    done = {p.parent.name for p in logs if '"kind":"deliver"' in p.read_text(errors="replace")}
    return done == set(names)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_interrupt_tears_down_and_writes_the_run_directory(tmp_path, sig, code):
    """steady.yaml on local, interrupted mid-run: exit 130/143, no node left, partial run dir written."""
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "splitbrain.harness.cli",
            "run",
            str(ROOT / "scenarios" / "steady.yaml"),
            "--backend",
            "local",
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: all_nodes_up(out, "ABC"), "all three nodes to be up", proc)
        # Let traffic flow until every node has delivered something (asserted below): a busy
        # machine can leave one node behind the others.
        wait_for(lambda: all_nodes_delivered(out, "ABC"), "every node to deliver", proc)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, (stdout, stderr)
    assert ("interrupted" if sig == signal.SIGINT else "terminated") in stderr
    (run_dir,) = out.iterdir()
    assert processes_naming(str(run_dir)) == []
    assert str(run_dir) in stderr  # the partial run directory is named
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["outcome"] == "error" and verdict["backend"] == "local"
    assert "interrupted" in verdict["error"]
    assert (run_dir / "scenario.yaml").exists() and (run_dir / "timeline.jsonl").exists()
    for name in "ABC":
        node_dir = run_dir / "nodes" / name
        assert not list(node_dir.glob("events-inc*.jsonl"))
        kinds = [json.loads(line)["kind"] for line in (node_dir / "events.jsonl").read_text().splitlines()]
        # Stopped gracefully by the teardown: final windows, then node_stop.
        assert "deliver" in kinds and kinds[-1] == "node_stop" and "window" in kinds


def test_harness_killed_with_sigkill_takes_its_nodes_along(tmp_path):
    """steady.yaml on local, harness killed -9 (no handler can run): the kernel kills every node."""
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "splitbrain.harness.cli",
            "run",
            str(ROOT / "scenarios" / "steady.yaml"),
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: all_nodes_up(out, "ABC"), "all three nodes to be up", proc)
        (run_dir,) = out.iterdir()
        assert len(processes_naming(str(run_dir))) == 3
        proc.kill()
        proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    deadline = time.monotonic() + DEADLINE_S
    while processes_naming(str(run_dir)):
        assert time.monotonic() < deadline, f"nodes still alive: {processes_naming(str(run_dir))}"
        time.sleep(0.05)
