"""Membership (GMS) end to end: views the nodes make themselves, judged on every backend.

The one-way partition A->B of the SYNC design, with no `view:` step (scenarios/gms-one-way-split.yaml):
B's side stops hearing A and installs a view without it while A still lists B (asymmetric views,
read from the nodes' own `view` events), the heal merges the views into one that every node
holds within a stated bound, the windows resync, and every message is delivered once and in order
(the default checks with `membership: gms`: fifo, no_duplicates, no_loss, windows_synced,
views_agree, no_errors). On the simulator exactly, on local processes with generous bounds; on
docker (iptables) in tests/harness/test_gms_docker.py. The pytest plugin's `membership="gms"` and
`wait_view` drive the same story step by step.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitbrain.harness.checks import run_checks
from splitbrain.harness.eventlog import read_events, read_run
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario, parse_scenario
from splitbrain.harness.sim import Simulation

# The plugin is registered as a pytest11 entry point once installed; before that, ask for it here.
pytest_plugins = (
    []
    if any(ep.value == "splitbrain.harness.plugin" for ep in entry_points(group="pytest11"))
    else ["splitbrain.harness.plugin"]
)

ROOT = Path(__file__).resolve().parents[2]
SPLIT = ROOT / "scenarios" / "gms-one-way-split.yaml"
# Heal to one merged view on every node: the scenario's merge_interval-driven discovery plus a view
# round. Exact on the simulator; the local bound is generous for 2 busy cores.
SIM_MERGE_BOUND_S = 10.0
LOCAL_MERGE_BOUND_S = 10.0


def views_over_time(events: list[dict]) -> dict[str, list[tuple[float, tuple[str, ...]]]]:
    """node -> [(t, members)] of every view it installed, in order."""
    out: dict[str, list] = {}
    for ev in events:
        if ev["kind"] == "view" and ev["node"] != "harness":
            out.setdefault(ev["node"], []).append((ev["t"], tuple(ev.get("members") or ())))
    return out


def view_at(history: list[tuple[float, tuple[str, ...]]], t: float) -> tuple[str, ...] | None:
    held = None
    for when, members in history:
        if when <= t:
            held = members
    return held


def partition_window(events: list[dict]) -> tuple[float, float]:
    on = next(e["t"] for e in events if e["kind"] == "fault_on" and e.get("fault") == "partition")
    off = next(e["t"] for e in events if e["kind"] == "fault_off" and e.get("fault") == "partition")
    return on, off


def asymmetric_moment(events: list[dict]) -> float | None:
    """A time during the partition when B's view lacks A while A's view still lists B."""
    on, off = partition_window(events)
    views = views_over_time(events)
    for t, members in views.get("B", []):
        if on <= t <= off and "A" not in members:
            a_view = view_at(views.get("A", []), t)
            if a_view is not None and "B" in a_view:
                return t
    return None


def run_split(backend: str, out, **kwargs):
    """One run of the split on a live backend (its checks are judged by judge_split)."""
    return run_scenario(load_scenario(SPLIT), backend=backend, out=out, **kwargs)


def judge_split(outcome, bound: float) -> str:
    """Assert what the one-way split with gms must show; return a description for messages."""
    v = outcome.verdict
    text = "\n".join(f"  {c.name}: {'ok' if c.passed else 'FAILED'}: {c.explanation}" for c in v.checks)
    where = f"{v.summary()} run directory {outcome.run_dir}\n{text}"
    names = [c.name for c in v.checks]
    assert "views_agree" in names and "windows_synced" in names, names
    assert v.passed, where
    events = read_run(outcome.run_dir)
    assert asymmetric_moment(events) is not None, f"no asymmetric views during the partition\n{where}"
    agree = next(c for c in v.checks if c.name == "views_agree")
    assert sorted(agree.details["views"]["A"]["members"]) == ["A", "B", "C"], where
    heal_to_view = agree.details["heal_to_agreement_s"]
    assert heal_to_view is not None and heal_to_view <= bound, f"merged {heal_to_view}s after the heal\n{where}"
    # The merge was GMS's: a view installed for a merge reason after the heal, no injected view.
    off = partition_window(events)[1]
    assert any(e["kind"] == "view" and e["t"] > off and e.get("reason") == "merge" for e in events), where
    assert not any(e["kind"] == "fault_on" and e.get("fault") == "view" for e in events)
    return where


def test_one_way_split_gives_asymmetric_views_then_one_merged_view_on_sim(tmp_path):
    """Sim, 5 seeds: B's side drops A while A lists B, one merged view within the bound after the
    heal, windows in sync, every message once and in order."""
    scenario = load_scenario(SPLIT)
    for seed in range(5):
        judge_split(run_scenario(scenario, seed=seed, backend="sim", out=tmp_path), SIM_MERGE_BOUND_S)


@pytest.mark.timeout(300)
def test_one_way_split_gives_asymmetric_views_then_one_merged_view_on_local(tmp_path):
    """Local processes: the same story over real UDP, the partition by the in-process fault layer
    (whichever of [A, B, C] or [A, C, B] the JOINs formed: a suspicion goes to the member that acts)."""
    outcome = run_split("local", tmp_path)
    judge_split(outcome, LOCAL_MERGE_BOUND_S)
    timeline = read_events(outcome.run_dir / "timeline.jsonl")
    assert any(e["kind"] == "fault_on" and e.get("fault") == "partition" for e in timeline)


# ---- the pytest plugin, step by step --------------------------------------------------------------


@pytest.mark.splitbrain_backend("sim", "local")
def test_plugin_gms_cluster_forms_splits_and_merges(splitbrain_cluster, faults):
    """membership="gms": the nodes form one view by themselves, a one-way partition makes B's view
    drop A while A keeps B, the heal merges, and every default check passes (views_agree too)."""
    cluster = splitbrain_cluster(nodes=3, membership="gms", config={"xmit_interval": 0.5, "conn_close_timeout": 2.0})
    formed = cluster.wait_view(["A", "B", "C"], timeout=15)
    assert formed["coord"] in ("A", "B", "C") and sorted(formed["members"]) == ["A", "B", "C"]
    # Cut the coordinator's messages to the member after it (B, or C when C's JOIN came first on
    # real processes): that member suspects the coordinator and, being next in line, excludes it.
    coord, victim = formed["members"][0], formed["members"][1]
    cluster.send(coord, victim, rate=50, duration=10)
    faults.partition(coord, victim, one_way=True)

    def asymmetric():
        views = cluster.views()
        return coord not in views[victim]["members"] and victim in views[coord]["members"]

    cluster.eventually(asymmetric, timeout=15, what=f"{victim}'s view without {coord} while {coord} lists {victim}")
    faults.heal()
    merged = cluster.wait_view(["A", "B", "C"], timeout=20)
    assert merged["view_id"] > formed["view_id"]
    cluster.wait_settled(timeout=60)
    names = [r.name for r in cluster.assert_checks()]
    assert "views_agree" in names


@pytest.mark.splitbrain_backend("sim")
def test_wait_view_timeout_names_each_nodes_view(splitbrain_cluster, faults):
    """wait_view for a view that does not come (C is alive and well) fails naming every node's view."""
    cluster = splitbrain_cluster(nodes=3, membership="gms")
    formed = cluster.wait_view(["A", "B", "C"], timeout=15)
    with pytest.raises(AssertionError) as err:
        cluster.wait_view(["A", "B"], timeout=2)
    text = str(err.value)
    assert "expected every running node to hold one view of [A, B] within 2s" in text
    held = f"view {formed['view_id']} coord {formed['coord']} [{', '.join(formed['members'])}]"
    for name in "ABC":
        assert f"{name}: {held}" in text, text
    with pytest.raises(ValueError, match="wait_view: Z not in the cluster"):
        cluster.wait_view(["A", "Z"], timeout=1)


# ---- hypothesis: the liveness phase of a seed-first simulation ------------------------------------

GMS_NODES = ["A", "B", "C", "D"]
QUIET_S = 15.0  # after the last heal or restart: fd_timeout + merge rounds + a join, with margin


@st.composite
def membership_faults(draw):
    """Partitions (one-way or two-way) and kills, each undone later (a heal or a restart), so that
    every node is alive and connected in the quiet phase; at most one kill per node."""
    steps: list[dict] = []
    killed: set[str] = set()
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.floats(1.0, 5.0).map(lambda t: round(t, 2)))
        length = draw(st.floats(0.5, 4.0).map(lambda t: round(t, 2)))
        kind = draw(st.sampled_from(["oneway", "twoway", "kill"]))
        order = draw(st.permutations(GMS_NODES))
        if kind == "kill" and order[0] not in killed:
            killed.add(order[0])
            steps += [{"at": start, "kill": order[0]}, {"at": start + length, "restart": order[0]}]
            continue
        if kind == "oneway":
            fault = {"partition": {"from": order[0], "to": order[1]}}
        else:
            cut = draw(st.integers(1, 3))
            fault = {"partition": [list(order[:cut]), list(order[cut:])]}
        steps += [{"at": start, **fault}, {"at": start + length, "heal": len(steps)}]
    return steps


@given(steps=membership_faults(), seed=st.integers(0, 2**32))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None)
def test_generated_partitions_kills_and_restarts_end_with_one_view(steps, seed):
    """Hypothesis schedules of partitions, heals, kills and restarts on 4 gms nodes: after a quiet
    phase every live node holds the same view of all four (views_agree), and nothing is delivered
    twice or out of order. A failure names the seed; `splitbrain run` replays it."""
    scenario = parse_scenario(
        {
            "name": "gms-chaos",
            "protocol": "unicast3",
            "membership": "gms",
            "nodes": GMS_NODES,
            "workload": [
                {"from": "A", "to": "B", "rate": 20, "duration": 9},
                {"from": "C", "to": "D", "rate": 20, "duration": 9},
            ],
            "schedule": steps,
            "duration": 9,
            "settle": QUIET_S,
            "checks": ["fifo", "no_duplicates", "views_agree"],
            "seed": seed,
        }
    )
    events = Simulation(scenario, seed).run().all_events()
    results = {r.name: r for r in run_checks(events, list(scenario.checks))}
    failed = {n: r.explanation for n, r in results.items() if not r.passed}
    assert not failed, f"seed {seed}, schedule {steps}: {failed}"
    assert sorted(results["views_agree"].details["live"]) == GMS_NODES
