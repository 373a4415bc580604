"""`splitbrain explore --backend local`: explored runs as real processes (splitbrain's nodes and
JGroups nodes), at most --jobs clusters at a time, every cluster gone after each run and after a
Ctrl-C. The live tests are slow (each run starts a cluster and takes seconds of wall time)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.cli import main
from splitbrain.harness.explore import nemesis
from splitbrain.harness.explore.vocab import LIVE_DURATIONS_S, vocabulary
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario
from splitbrain.harness.testlib import eventually
from tests.leaks import processes_naming

ROOT = Path(__file__).resolve().parents[2]
LOCAL = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")
DEADLINE_S = 120.0


def _explore(capsys, out: Path, *argv: str) -> tuple[int, dict]:
    rc = main(["explore", *argv, "--backend", "local", "--out", str(out), "--json", "--quiet"])
    captured = capsys.readouterr()
    return rc, json.loads(captured.out) if captured.out.strip() else {}


# ---- fast: the shape of a live session --------------------------------------------------------


def test_live_runs_are_short_and_jgroups_streams_mix_unicasts_and_multicasts():
    import random

    live = vocabulary("unicast3", {}, 3, live=True)
    assert {nemesis.draw(random.Random(s), live)["duration"] for s in range(40)} <= set(LIVE_DURATIONS_S)
    jgroups = vocabulary("jgroups", {}, 3, live=True, recovery_bound_s=6.0)
    assert jgroups.settle_s == 8.0 and not jgroups.views and not jgroups.admin_sync
    assert set(jgroups.message_types) >= {"DATA", "NAKACK_MSG", "STABLE"}
    targets = {s["to"] == "all" for seed in range(40) for s in nemesis.draw(random.Random(seed), jgroups)["workload"]}
    assert targets == {True, False}  # unicast streams beside multicast ones


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--protocol", "jgroups"], "--backend local"),
        (["--protocol", "jgroups", "--backend", "local", "--set", "xmit_interval=1"], "--set xmit_interval"),
        (["--protocol", "jgroups", "--backend", "local", "--set", "recovery_bound=-1"], "--set recovery_bound"),
        (["--protocol", "jgroups", "--backend", "local", "--against", "recovery_bound=3"], "--against recovery_bound"),
        (["--protocol", "unicast3", "--backend", "docker"], "--backend docker: not supported yet"),
    ],
)
def test_bad_live_input_exits_2_naming_it(capsys, tmp_path, argv, names):
    assert main(["explore", *argv, "--runs", "1", "--out", str(tmp_path)]) == 2
    assert names in capsys.readouterr().err


# ---- live --------------------------------------------------------------------------------------


@LOCAL
@pytest.mark.slow
@pytest.mark.timeout(900)  # four live runs, a live confirmation of the shrunk file, and its rerun
def test_local_finds_a_setting_that_loses_messages_and_writes_a_failing_file(capsys, tmp_path):
    """NAKACK2 without retransmission (allow_unsafe) under loss, on real processes: explore finds
    no_loss, writes a scenario whose rerun line names local, and that file fails on local."""
    out = tmp_path / "out"
    rc, doc = _explore(
        capsys,
        out,
        "--protocol",
        "nakack2",
        "--set",
        "xmit_interval=0",
        "--set",
        "allow_unsafe=true",
        "--faults",
        "loss",
        "--runs",
        "4",
        "--jobs",
        "2",
        "--max-failures",
        "1",
    )
    assert rc == 1, doc
    assert doc["backend"] == "local" and doc["runs"] == 4 and doc["errors"] == 0
    assert doc["seconds_per_run"] > 1.0  # real processes, wall time
    f = doc["failures"][0]
    assert f["check"] == "no_loss"
    assert f["rerun"] == f"splitbrain run {f['path']} --backend local"
    # Only the failing run's directory is kept; every cluster is gone.
    kept = sorted(p.name for p in (out / "runs").iterdir())
    assert kept == [Path(f["run_dir"]).name]
    assert processes_naming(str(out)) == []
    outcome = run_scenario(load_scenario(f["path"]), backend="local", out=tmp_path / "rerun")
    assert "no_loss" in [c.name for c in outcome.verdict.checks if not c.passed], outcome.verdict.summary()
    assert yaml.safe_load(Path(f["path"]).read_text())["protocol"] == "nakack2"


@LOCAL
@pytest.mark.slow
def test_jgroups_explore_runs_real_jgroups_nodes(capsys, tmp_path):
    """One explored run of real JGroups nodes: judged (not an error), behaviours read from their
    event logs, no JVM left behind."""
    from splitbrain.node.jgroups.launch import runtime_problem

    assert runtime_problem() is None, runtime_problem()
    out = tmp_path / "out"
    rc, doc = _explore(capsys, out, "--protocol", "jgroups", "--faults", "partition,loss", "--runs", "1")
    assert rc in (0, 1), doc
    assert doc["runs"] == 1 and doc["errors"] == 0, doc
    assert doc["behaviours"] > 5
    assert processes_naming(str(out)) == []


@LOCAL
@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_interrupt_stops_every_cluster(tmp_path, sig, code):
    """Ctrl-C (or SIGTERM) while clusters run: exit 130 (143), no node process left."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "splitbrain.harness.cli",
            "explore",
            "--protocol",
            "unicast3",
            "--backend",
            "local",
            "--runs",
            "8",
            "--jobs",
            "2",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def a_cluster_up() -> bool:
            assert proc.poll() is None, proc.communicate()
            logs = list(out.glob("runs/*/nodes/*/node.log"))
            up = {p.parent.parent.parent for p in logs if '"ready": true' in p.read_text()}
            return bool(up) and len(processes_naming(str(out))) >= 3

        eventually(a_cluster_up, timeout=DEADLINE_S, interval=0.1, what="a cluster up")
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stderr
    assert ("terminated" if sig == signal.SIGTERM else "interrupted") in stderr
    assert processes_naming(str(out)) == []
