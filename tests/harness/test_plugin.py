"""The pytest plugin (harness.plugin), used the way a user would: tests written with its fixtures
and run by pytest in a subprocess (pytester).

- a split-and-heal test in a few lines, on sim (virtual time, milliseconds), local and docker;
- on sim, the same test replays exactly from its seed (identical event logs);
- a failing test's report holds its seed and reproduction line, the run directory, every window's
  last state and the timeline; the session's seed is in the report header;
- the marker selects (and with several names, parametrizes) backends, and marks docker tests;
- without a Docker engine, docker tests are skipped with the reason;
- pytest-xdist: two workers run docker clusters side by side without colliding;
- `eventually` says what it expected and what it last saw;
- the library behind it (harness.testlib) imports without pytest, and its names are still
  importable from harness.plugin.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from splitbrain import harness
from splitbrain.harness.plugin import EventuallyTimeout, SplitbrainCluster, cluster_scenario, eventually
from splitbrain.harness.scenario import load_scenario
from splitbrain.harness.sim.driver import SimBackend

pytest_plugins = ["pytester"]

# Once the pytest11 entry point is installed pytest loads the plugin by itself; `-p` on top of
# that would register it twice.
REGISTERED = any(ep.value == "splitbrain.harness.plugin" for ep in entry_points(group="pytest11"))
PLUGIN = [] if REGISTERED else ["-p", "splitbrain.harness.plugin"]
COMMON = [*PLUGIN, "-p", "no:cacheprovider", "-p", "no:randomly"]


def docker_available() -> tuple[bool, str]:
    try:
        from splitbrain.harness.backends.docker import DockerBackend
    except ImportError as exc:
        return False, str(exc)
    return DockerBackend().check()


SPLIT_AND_HEAL = '''
def test_split_and_heal(splitbrain_cluster, faults):
    """A one-way split A->B while A streams to B, then the heal: nothing lost, nothing doubled."""
    cluster = splitbrain_cluster(nodes=3, config={"xmit_interval": 0.2, "conn_close_timeout": 1.0})
    cluster.send("A", "B", rate=100, duration=3)
    faults.partition("A", "B", one_way=True)
    cluster.sleep(1.5)
    faults.heal()
    cluster.wait_settled()
    cluster.assert_checks()
'''


@pytest.mark.live
def test_split_and_heal_in_a_few_lines_on_local(pytester):
    pytester.makepyfile(test_user=SPLIT_AND_HEAL)
    result = pytester.runpytest_subprocess(*COMMON, "-v", "--splitbrain-backend", "local", timeout=240)
    result.assert_outcomes(passed=1)


SPLIT_AND_HEAL_SIM_AND_LOCAL = """
import time

import pytest

@pytest.mark.splitbrain_backend("sim", "local")
def test_split_and_heal(splitbrain_cluster, faults):
    wall0 = time.perf_counter()
    cluster = splitbrain_cluster(nodes=3, config={"xmit_interval": 0.2, "conn_close_timeout": 1.0})
    cluster.send("A", "B", rate=100, duration=3)
    faults.partition("A", "B", one_way=True)
    cluster.sleep(1.5)
    faults.heal()
    cluster.wait_settled()
    cluster.assert_checks()
    if cluster.backend == "sim":
        # The stream alone lasts 3 s of virtual time; the simulator needs far less of the wall clock.
        assert cluster.now() >= 3.0, cluster.now()
        assert time.perf_counter() - wall0 < cluster.now(), "the simulator ran slower than real time"
"""


@pytest.mark.slow
def test_split_and_heal_in_a_few_lines_on_sim_in_virtual_time(pytester):
    """The same test, marked for sim and local, runs on sim in virtual time: seconds pass inside
    the simulation while the test takes a fraction of that on the wall clock."""
    pytester.makepyfile(test_user=SPLIT_AND_HEAL_SIM_AND_LOCAL)
    result = pytester.runpytest_subprocess(*COMMON, "-v", "-k", "sim", timeout=240)
    result.assert_outcomes(passed=1)
    assert "test_split_and_heal[sim] PASSED" in result.stdout.str()


@pytest.mark.docker
def test_split_and_heal_in_a_few_lines_on_docker(pytester):
    ok, why = docker_available()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")
    pytester.makepyfile(test_user="import pytest\n\n@pytest.mark.splitbrain_backend('docker')" + SPLIT_AND_HEAL)
    result = pytester.runpytest_subprocess(*COMMON, "-v", "-s", timeout=600)
    result.assert_outcomes(passed=1)


FAILS_ON_PURPOSE = """
def test_fails(splitbrain_cluster, faults):
    cluster = splitbrain_cluster(nodes=2)
    cluster.send("A", "B", count=20, rate=100)
    cluster.wait_delivered("B", "A", 20)
    faults.partition("A", "B", one_way=False)
    assert False, "on purpose"
"""


@pytest.mark.parametrize("backend", ["sim", pytest.param("local", marks=pytest.mark.live)])
def test_failure_report_has_seed_run_dir_windows_and_timeline(pytester, backend):
    pytester.makepyfile(test_fails=FAILS_ON_PURPOSE)
    xml = pytester.path / "report.xml"
    result = pytester.runpytest_subprocess(*COMMON, f"--junitxml={xml}", "--splitbrain-backend", backend, timeout=240)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert f"splitbrain: backend {backend}, seed 0 " in out  # the report header
    assert re.search(
        rf"splitbrain {backend}: seed 0 -+\nreproduce with: pytest test_fails.py::test_fails "
        rf"--splitbrain-seed 0 --splitbrain-backend {backend}\n",
        out,
    ), out
    assert re.search(rf"splitbrain {backend}: run directory -+\n\S+test_fails", out), out
    assert f"splitbrain {backend}: windows (GET /state)" in out
    # B's window for A: the 20 messages delivered, on the connection A opened.
    assert re.search(r'B: \{.*\{"conn_id": \d+, "high": 20, "low": 20, [^}]*"peer": "A", [^}]*"side": "recv"', out), out
    assert f"splitbrain {backend}: timeline" in out and "partition A | B" in out
    text = xml.read_text()
    assert 'property name="splitbrain_run_dir"' in text


@pytest.mark.slow
def test_the_reproduction_line_replays_a_sim_failure_exactly(pytester):
    """--splitbrain-seed: the header names it, the failure prints the line, and running that line
    gives the same event logs (on sim, where a seed fixes everything)."""
    pytester.makepyfile(
        test_fails=FAILS_ON_PURPOSE.replace("nodes=2)", "nodes=2, config={'xmit_interval': 0.2})").replace(
            "one_way=False)", 'one_way=False)\n    faults.loss("B->A", 0.5)\n    cluster.sleep(1)'
        )
    )
    first, second = pytester.path / "first", pytester.path / "second"
    result = pytester.runpytest_subprocess(
        *COMMON, "--splitbrain-backend", "sim", "--splitbrain-seed", "7", "--splitbrain-runs", str(first), timeout=240
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "splitbrain: backend sim, seed 7 " in out
    line = "pytest test_fails.py::test_fails --splitbrain-seed 7 --splitbrain-backend sim"
    assert f"reproduce with: {line}" in out
    assert re.search(rf"splitbrain: reproduce the failures =+\n{line}\n", out), out
    args = line.split()[1:]
    result = pytester.runpytest_subprocess(*COMMON, *args, "--splitbrain-runs", str(second), timeout=240)
    result.assert_outcomes(failed=1)
    [run1], [run2] = first.iterdir(), second.iterdir()
    assert run1.name.startswith("test_fails-7-")
    logs = sorted(p.relative_to(run1).as_posix() for p in run1.rglob("*.jsonl"))
    assert logs == ["nodes/A/events.jsonl", "nodes/B/events.jsonl", "timeline.jsonl"]
    for log in logs:
        assert (run1 / log).read_bytes() == (run2 / log).read_bytes(), log


@pytest.mark.slow
def test_failed_scenario_run_reports_its_verdict(pytester):
    """splitbrain_run: a scenario that fails its checks shows its verdict and timeline."""
    from pathlib import Path

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "jgrp-1875-first-seqno.yaml"
    pytester.makepyfile(
        test_run=f"""
def test_scenario(splitbrain_run):
    outcome = splitbrain_run({str(scenario)!r}, backend="sim")
    assert outcome.verdict.checks[2].passed, "no_loss"
"""
    )
    result = pytester.runpytest_subprocess(*COMMON, timeout=240)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "splitbrain run jgrp-1875-first-seqno on sim: verdict and timeline" in out
    run_dir = re.search(r"splitbrain run jgrp-1875-first-seqno on sim: run directory -+\n(\S+)\n", out).group(1)
    seed = load_scenario(scenario).seed
    assert f"reproduce with: splitbrain run {run_dir}/scenario.yaml --seed {seed} --backend sim" in out, out
    assert "no_loss: FAILED" in out and "partition" in out


@pytest.mark.slow
def test_marker_parametrizes_and_marks_docker(pytester):
    pytester.makepyfile(
        test_markers="""
import pytest

@pytest.mark.splitbrain_backend("local", "docker")
def test_both(splitbrain_cluster):
    pass

@pytest.mark.splitbrain_backend("sim", "local", "docker")
def test_three(splitbrain_cluster):
    pass

@pytest.mark.splitbrain_backend("docker")
def test_docker_only(splitbrain_cluster):
    pass

def test_default(splitbrain_cluster):
    pass
"""
    )
    result = pytester.runpytest_subprocess(*COMMON, "--collect-only", "-q", timeout=120)
    out = result.stdout.str()
    assert "test_both[local]" in out and "test_both[docker]" in out, out
    assert all(f"test_three[{name}]" in out for name in ("sim", "local", "docker")), out
    result = pytester.runpytest_subprocess(*COMMON, "--collect-only", "-q", "-m", "not docker", timeout=120)
    out = result.stdout.str()
    assert "test_both[local]" in out and "test_default" in out
    assert "test_both[docker]" not in out and "test_docker_only" not in out, out
    assert "test_three[sim]" in out and "test_three[docker]" not in out, out


def test_docker_tests_skip_with_the_reason_without_an_engine(pytester, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    pytester.makepyfile(
        test_skip="""
import pytest

@pytest.mark.splitbrain_backend("docker")
def test_needs_docker(splitbrain_cluster):
    splitbrain_cluster(2)
"""
    )
    result = pytester.runpytest_subprocess(*COMMON, "-rs", timeout=120)
    result.assert_outcomes(skipped=1)
    assert "splitbrain backend docker unavailable here: no Docker engine reachable" in result.stdout.str()


@pytest.mark.docker
def test_xdist_workers_run_docker_clusters_side_by_side(pytester):
    ok, why = docker_available()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")
    pytest.importorskip("xdist")
    pytester.makepyfile(
        test_par="""
import json, os
import pytest

@pytest.mark.splitbrain_backend("docker")
@pytest.mark.parametrize("n", [1, 2])
def test_cluster(splitbrain_cluster, faults, n, tmp_path_factory):
    cluster = splitbrain_cluster(nodes=2, config={"xmit_interval": 0.2})
    cluster.send("A", "B", rate=100, count=100)
    faults.loss("A->B", 0.3)
    cluster.sleep(0.5)
    faults.heal()
    cluster.wait_settled()
    inner = cluster.cluster
    record = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "id": inner.cluster_id, "subnet": str(inner.subnet)}
    with open(os.path.join(os.environ["SB_RECORDS"], f"{inner.cluster_id}.json"), "w") as f:
        json.dump(record, f)
    cluster.assert_checks()
"""
    )
    records = pytester.path / "records"
    records.mkdir()
    pytester._monkeypatch.setenv("SB_RECORDS", str(records))
    result = pytester.runpytest_subprocess(*COMMON, "-n", "2", timeout=600)
    result.assert_outcomes(passed=2)
    seen = [json.loads(p.read_text()) for p in records.glob("*.json")]
    assert len(seen) == 2
    assert len({r["worker"] for r in seen}) == 2, seen
    assert len({r["id"] for r in seen}) == 2 and len({r["subnet"] for r in seen}) == 2, seen


# ---- eventually ---------------------------------------------------------------------------------------


def test_eventually_returns_the_first_truthy_value():
    calls = iter([0, None, 7])
    assert eventually(lambda: next(calls), timeout=5, interval=0.01) == 7


def test_eventually_says_what_it_expected_and_last_saw():
    with pytest.raises(EventuallyTimeout) as info:
        eventually(
            lambda: None,
            timeout=0.2,
            interval=0.05,
            what="B to deliver 10",
            describe=lambda _v: "B delivered 3",
            context=lambda: "--- tail of B",
        )
    message = str(info.value)
    assert message.startswith("expected B to deliver 10 within 0.2s (")
    assert "last seen: B delivered 3" in message and message.endswith("--- tail of B")


def test_eventually_timeout_message():
    state = {"n": 0}

    def check():
        state["n"] += 1
        assert state["n"] > 1000, f"only {state['n']} so far"

    with pytest.raises(EventuallyTimeout) as info:
        eventually(check, timeout=0.2, interval=0.05, what="n above 1000", context=lambda: "--- context")
    message = str(info.value)
    assert message.startswith("expected n above 1000 within 0.2s")
    assert "last seen: AssertionError: only" in message and "--- context" in message


def test_eventually_can_poll_in_virtual_time():
    """With a clock and a sleep of its own (the simulator's), the timeout is on that clock."""
    now = [0.0]

    def advance(seconds):
        now[0] += seconds

    with pytest.raises(EventuallyTimeout) as info:
        eventually(lambda: None, timeout=30, interval=0.5, what="never", clock=lambda: now[0], sleep=advance)
    assert now[0] == 30.0 and "(61 tries)" in str(info.value)
    assert eventually(lambda: now[0] >= 31.0, timeout=5, interval=0.5, clock=lambda: now[0], sleep=advance)
    assert now[0] == 31.0


def test_eventually_lets_real_errors_through():
    def broken():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        eventually(broken, timeout=1)


# ---- the library and the pytest wiring ------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]

# A fresh interpreter in which any import of pytest fails, so that an import of pytest anywhere
# under harness.testlib (directly or through a module it imports) shows up.
IMPORT_WITHOUT_PYTEST = """
import sys

class NoPytest:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pytest", "_pytest"):
            raise ImportError(f"{name} is blocked: harness.testlib must work without pytest")
        return None

sys.meta_path.insert(0, NoPytest())
import splitbrain.harness.testlib
from splitbrain import harness
print(sorted(m for m in sys.modules if m.split(".")[0] in ("pytest", "_pytest")))
"""


def test_library_imports_without_pytest():
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_WITHOUT_PYTEST],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_library_names_are_still_importable_from_the_plugin():
    for name in harness.plugin.__all__:
        assert getattr(harness.plugin, name) is getattr(harness.testlib, name), name
    assert {
        "SplitbrainCluster",
        "FaultController",
        "Checkers",
        "cluster_scenario",
        "eventually",
        "EventuallyTimeout",
    } <= set(harness.plugin.__all__)


# ---- the sim backend, without pytest in between ---------------------------------------------------


def _sim_test_body(tmp_path: Path, seed: int) -> tuple[SplitbrainCluster, dict[str, bytes]]:
    """Every kind of step a test can take, on a sim cluster: streams, loss, a drop rule, pause and
    resume, kill and restart, heal, settle, checks."""
    scenario = cluster_scenario(3, config={"xmit_interval": 0.2, "conn_close_timeout": 1.0}, seed=seed)
    run_dir = tmp_path / f"run-{seed}-{len(list(tmp_path.iterdir()))}"
    cluster = SplitbrainCluster(SimBackend().create_cluster(scenario, run_dir, seed=seed), scenario).start()
    try:
        cluster.send("A", "B", rate=100, count=200)
        cluster.send("B", "C", rate=50, duration=2)
        loss = cluster.faults.loss("A->B", 0.3)
        cluster.faults.drop(at="C", from_="B", count=5)
        cluster.sleep(0.5)
        cluster.faults.pause("B")
        cluster.sleep(0.5)
        cluster.faults.resume("B")
        cluster.faults.kill("C")
        cluster.sleep(0.3)
        cluster.faults.restart("C")
        cluster.faults.heal(loss)
        cluster.faults.heal()
        cluster.wait_settled()
        cluster.assert_checks()
    finally:
        cluster.teardown()
    return cluster, {p.relative_to(run_dir).as_posix(): p.read_bytes() for p in sorted(run_dir.rglob("*.jsonl"))}


def test_sim_cluster_replays_exactly_from_its_seed(tmp_path):
    """Two runs of one test with one seed: identical event logs and timeline; another seed differs."""
    cluster, first = _sim_test_body(tmp_path, seed=5)
    _, again = _sim_test_body(tmp_path, seed=5)
    _, other = _sim_test_body(tmp_path, seed=6)
    assert sorted(first) == ["nodes/A/events.jsonl", "nodes/B/events.jsonl", "nodes/C/events.jsonl", "timeline.jsonl"]
    assert first == again
    assert first != other
    # 0.5 + 0.5 + 0.3 s of sleeps, then settling: virtual time that the wall clock never waited for.
    assert cluster.now() >= 1.3
    timeline = [json.loads(line) for line in first["timeline.jsonl"].decode().splitlines()]
    assert [(ev["t"], ev["kind"], ev["fault"]) for ev in timeline[:4]] == [
        (0.0, "fault_on", "loss"),
        (0.0, "fault_on", "drop"),
        (0.5, "fault_on", "pause"),
        (1.0, "fault_off", "pause"),
    ]


def test_sim_cluster_reports_virtual_time_windows_and_deliveries(tmp_path):
    """The admin reads a test and a failure report make, answered by the simulator."""
    scenario = cluster_scenario(2, seed=1)
    cluster = SplitbrainCluster(SimBackend().create_cluster(scenario, tmp_path / "run", seed=1), scenario).start()
    try:
        assert cluster.backend == "sim" and cluster.seed == 1 and cluster.now() == 0.0
        cluster.send("A", "B", count=20, rate=100)
        assert cluster.wait_delivered("B", "A", 20) == 20
        assert 0.19 <= cluster.now() <= 1.0, cluster.now()  # 20 messages at 100/s, polled every 0.1 s
        [send] = cluster.state("A")["windows"]
        assert (send["peer"], send["side"], send["high"]) == ("B", "send", 20)
        assert cluster.state("B")["windows"][0]["side"] == "recv"
        cluster.faults.kill("B")
        assert cluster.states()["B"].startswith("node is dead; last seen at t=")
    finally:
        cluster.teardown()
    assert (tmp_path / "run" / "nodes" / "B" / "events.jsonl").read_text().count('"kind":"deliver"') == 20
