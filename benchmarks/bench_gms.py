"""Membership (GMS) timings and overhead, on the simulator (seeds) and on local processes (runs).

- formation: launch to every member holding the full view. Local: the harness's clock
  (`cluster.now()`, the run clock every event is stamped with) just before the processes are
  started, to the latest first `view` event listing all N members; also when `start()` returned
  (every node answering /health) and the protocol's share, from the last node's `node_start` to
  the full view. Sim: virtual time from 0. For 3, 5 and 10 nodes.
- failure detection: a member (the last one) is killed after formation; the time from the kill to
  the first `suspect` of it, and to the moment every survivor installed a view without it, for
  several `fd_timeout`s.
- heal to merged view: scenarios/gms-one-way-split.yaml (a one-way partition A->B for 6 s) with
  its streams ending during the partition (so the workload does not hide the resync):
  views_agree's `heal_to_agreement_s` (last heal to the last node installing the merged view);
  then merged view to every window in sync: windows_synced's last heal + max sync time, minus the
  time of the merged view (0 when the windows were in sync first).
- overhead: an idle cluster (no workload) after formation, messages and frames sent per second per
  node: everything GMS makes (heartbeats, discovery/merge info, and UNICAST3's acks of the
  reliable GMS messages). Sim: the simulator's frame counter (idle, every message is a frame of
  its own); local: GET /metrics
  (`splitbrain_messages_total{direction="out"}`, `splitbrain_frames_total{direction="out"}`).

Run: .venv/bin/python benchmarks/bench_gms.py [--quick] [--parts formation,fd,merge,overhead]
     [--seeds 20] [--runs 3] [--docker] [--json FILE]
Prints progress lines, then one Markdown table per part.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded

from splitbrain.harness.backends import get_backend
from splitbrain.harness.checks import run_checks
from splitbrain.harness.scenario import load_scenario, parse_scenario
from splitbrain.harness.sim.driver import SimBackend
from splitbrain.harness.sim.simulator import simulate
from splitbrain.harness.testlib import SplitbrainCluster, cluster_scenario

ROOT = Path(__file__).resolve().parent.parent
SPLIT = ROOT / "scenarios" / "gms-one-way-split.yaml"
FORMATION_GOAL_S = 1.5  # 3 local nodes


def _stats(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0, "median": None, "max": None, "min": None}
    return {"n": len(xs), "median": statistics.median(xs), "max": max(xs), "min": min(xs)}


def _fmt(s: dict) -> str:
    if not s["n"]:
        return "n/a"
    return f"median {s['median']:.3f} s, max {s['max']:.3f} s (min {s['min']:.3f}, n={s['n']})"


def full_view_time(events: list[dict], nodes: tuple[str, ...], after: float = float("-inf")) -> float | None:
    """When the last node first installed a view listing every one of `nodes` (after `after`)."""
    want = set(nodes)
    first: dict[str, float] = {}
    for ev in events:
        if ev["kind"] == "view" and ev["node"] in want and ev["t"] >= after and ev["node"] not in first:
            if set(ev.get("members") or ()) == want:
                first[ev["node"]] = ev["t"]
    return max(first.values()) if len(first) == len(want) else None


def exclusion_time(events: list[dict], survivors: tuple[str, ...], gone: str, after: float) -> tuple:
    """(first suspect of `gone` after `after`, when every survivor installed a view without it)."""
    suspect = None
    excluded: dict[str, float] = {}
    for ev in events:
        if ev["t"] < after:
            continue
        if ev["kind"] == "suspect" and ev.get("peer") == gone and suspect is None:
            suspect = ev["t"]
        if ev["kind"] == "view" and ev["node"] in survivors and gone not in (ev.get("members") or ()):
            excluded.setdefault(ev["node"], ev["t"])
    done = max(excluded.values()) if len(excluded) == len(survivors) else None
    return suspect, done


def _names(n: int) -> tuple[str, ...]:
    return tuple(chr(ord("A") + i) for i in range(n))


# ---- formation ------------------------------------------------------------------------------------


def formation_sim(n: int, seeds: int) -> dict:
    times = []
    for seed in range(seeds):
        sc = parse_scenario(
            {
                "name": f"form-{n}",
                "protocol": "unicast3",
                "membership": "gms",
                "nodes": n,
                "workload": [],
                "duration": 5,
                "settle": 0,
                "seed": seed,
            }
        )
        res = simulate(sc, seed)
        times.append(full_view_time(res.all_events(), sc.nodes))
    return _stats(times)


def _local_cluster(scenario, tmp: Path, seed: int = 0) -> SplitbrainCluster:
    from splitbrain.harness.rundir import make_run_dir

    run_dir = make_run_dir(tmp, scenario.name, seed)
    return SplitbrainCluster(get_backend("local").create_cluster(scenario, run_dir, seed=seed), scenario)


def formation_local(n: int, runs: int, tmp: Path) -> dict:
    full, started, protocol = [], [], []
    for run in range(runs):
        scenario = cluster_scenario(n, membership="gms", seed=run, name=f"form-{n}")
        sc = _local_cluster(scenario, tmp, run)
        try:
            t0 = sc.now()
            sc.start()
            started.append(sc.now() - t0)
            sc.wait_view(sc.names, timeout=30)
            events = sc.events()
            t = full_view_time(events, sc.names)
            full.append(None if t is None else t - t0)
            # The protocol's share: from the last node's node_start (its process is up and its
            # stack runs) to the full view everywhere.
            up = max((e["t"] for e in events if e["kind"] == "node_start"), default=None)
            protocol.append(None if t is None or up is None else t - up)
        finally:
            sc.teardown()
    return {"full_view": _stats(full), "start_returned": _stats(started), "last_start_to_view": _stats(protocol)}


# ---- failure detection -------------------------------------------------------------------------------


def _fd_scenario(n: int, fd_timeout: float, seed: int, kill_at: float, settle: float):
    nodes = _names(n)
    return parse_scenario(
        {
            "name": f"fd-{fd_timeout:g}",
            "protocol": "unicast3",
            "membership": "gms",
            "nodes": list(nodes),
            "config": {"fd_timeout": fd_timeout},
            "workload": [],
            "schedule": [{"at": kill_at, "kill": nodes[-1]}],
            "duration": kill_at,
            "settle": settle,
            "seed": seed,
        }
    )


def fd_sim(fd_timeouts: list[float], seeds: int, n: int = 3) -> dict:
    out = {}
    for fd in fd_timeouts:
        suspects, excluded = [], []
        for seed in range(seeds):
            kill_at = 3.0
            sc = _fd_scenario(n, fd, seed, kill_at, fd * 3 + 5)
            events = simulate(sc, seed).all_events()
            s, d = exclusion_time(events, sc.nodes[:-1], sc.nodes[-1], kill_at)
            suspects.append(None if s is None else s - kill_at)
            excluded.append(None if d is None else d - kill_at)
        out[fd] = {"suspect": _stats(suspects), "excluded": _stats(excluded)}
    return out


def fd_local(fd_timeouts: list[float], runs: int, tmp: Path, n: int = 3) -> dict:
    out = {}
    for fd in fd_timeouts:
        suspects, excluded = [], []
        for run in range(runs):
            scenario = cluster_scenario(n, membership="gms", config={"fd_timeout": fd}, seed=run, name=f"fd-{fd:g}")
            sc = _local_cluster(scenario, tmp, run)
            try:
                sc.start()
                sc.wait_view(sc.names, timeout=30)
                gone = sc.names[-1]
                t_kill = sc.now()
                sc.faults.kill(gone)
                sc.wait_view(sc.names[:-1], timeout=fd * 3 + 20)
                s, d = exclusion_time(sc.events(), sc.names[:-1], gone, t_kill)
                suspects.append(None if s is None else s - t_kill)
                excluded.append(None if d is None else d - t_kill)
            finally:
                sc.teardown()
        out[fd] = {"suspect": _stats(suspects), "excluded": _stats(excluded)}
    return out


# ---- heal to merged view to windows in sync ----------------------------------------------------------


def _merge_numbers(events: list[dict], names: list[str]) -> tuple:
    results = {r.name: r for r in run_checks(events, names)}
    agree, synced = results["views_agree"], results["windows_synced"]
    heal = agree.details.get("last_heal_t")
    merged = any(
        e["kind"] == "view" and e.get("reason") == "merge" and heal is not None and e["t"] > heal for e in events
    )
    if not merged:
        # The views never split (on real processes the formed view may be [A, C, B], where B's
        # suspicion alone changes nothing): no merge to time.
        return None, None, all(r.passed for r in results.values())
    heal_to_view = agree.details.get("heal_to_agreement_s") if agree.passed else None
    view_to_sync = None
    if agree.passed and synced.passed and synced.details.get("max_sync_time") is not None:
        synced_t = synced.details["last_heal_t"] + synced.details["max_sync_time"]
        view_to_sync = max(0.0, synced_t - agree.details["agreed_t"])
    return heal_to_view, view_to_sync, all(r.passed for r in results.values())


def split_idle_after_heal():
    """scenarios/gms-one-way-split.yaml with every stream ending during the partition (at 6 s; the
    heal is at 8 s), so what moves after the heal is the merge and the resync, not the workload."""
    data = load_scenario(SPLIT).to_dict()
    for stream in data["workload"]:
        stream["duration"] = 6
    data["name"] = "gms-one-way-split-idle"
    return parse_scenario(data)


def merge_sim(seeds: int) -> dict:
    base = split_idle_after_heal()
    heal, sync, passed = [], [], 0
    for seed in range(seeds):
        events = simulate(base, seed).all_events()
        h, s, ok = _merge_numbers(events, list(base.checks))
        heal.append(h)
        sync.append(s)
        passed += ok
    return {
        "heal_to_merged_view": _stats(heal),
        "merged_view_to_sync": _stats(sync),
        "passed": passed,
        "runs": seeds,
        "merged_runs": sum(h is not None for h in heal),
    }


def merge_local(runs: int, tmp: Path, backend: str = "local") -> dict:
    from splitbrain.harness.run import run_scenario

    base = split_idle_after_heal()
    heal, sync, passed = [], [], 0
    for run in range(runs):
        outcome = run_scenario(base, seed=run, backend=backend, out=tmp)
        from splitbrain.harness.eventlog import read_run

        h, s, ok = _merge_numbers(read_run(outcome.run_dir), list(base.checks))
        heal.append(h)
        sync.append(s)
        passed += ok
    return {
        "heal_to_merged_view": _stats(heal),
        "merged_view_to_sync": _stats(sync),
        "passed": passed,
        "runs": runs,
        "merged_runs": sum(h is not None for h in heal),
    }


# ---- overhead ---------------------------------------------------------------------------------------


def overhead_sim(n: int, seconds: float = 30.0, warmup: float = 5.0) -> dict:
    scenario = cluster_scenario(n, membership="gms", name=f"idle-{n}")
    with tempfile.TemporaryDirectory() as tmp:
        sc = SplitbrainCluster(SimBackend().create_cluster(scenario, Path(tmp), seed=0), scenario).start()
        try:
            sc.wait_view(sc.names, timeout=30)
            sc.sleep(warmup)
            sim = sc.cluster.sim
            m0, f0 = sim.msgs_sent, sim.frames_sent
            sc.sleep(seconds)
            m1, f1 = sim.msgs_sent, sim.frames_sent
        finally:
            sc.teardown()
    return {"msgs_per_s_per_node": (m1 - m0) / seconds / n, "frames_per_s_per_node": (f1 - f0) / seconds / n}


_METRIC = re.compile(r"^splitbrain_(messages|frames)_total\{([^}]*)\}\s+([0-9.e+]+)$", re.M)


def _sent(text: str) -> tuple[float, float]:
    msgs = frames = 0.0
    for name, labels, value in _METRIC.findall(text):
        if 'direction="out"' in labels:
            if name == "messages":
                msgs += float(value)
            else:
                frames += float(value)
    return msgs, frames


def overhead_local(n: int, tmp: Path, seconds: float = 10.0, warmup: float = 3.0) -> dict:
    scenario = cluster_scenario(n, membership="gms", name=f"idle-{n}")
    sc = _local_cluster(scenario, tmp)
    try:
        sc.start()
        sc.wait_view(sc.names, timeout=30)
        sc.sleep(warmup)
        before = [_sent(sc.admin(name).metrics()) for name in sc.names]
        t0 = time.monotonic()
        sc.sleep(seconds)
        after = [_sent(sc.admin(name).metrics()) for name in sc.names]
        dt = time.monotonic() - t0
    finally:
        sc.teardown()
    msgs = sum(a[0] - b[0] for a, b in zip(after, before))
    frames = sum(a[1] - b[1] for a, b in zip(after, before))
    return {"msgs_per_s_per_node": msgs / dt / n, "frames_per_s_per_node": frames / dt / n}


# ---- main -------------------------------------------------------------------------------------------


def _cell(s: dict) -> str:
    return "n/a" if not s["n"] else f"{s['median']:.3f} / {s['max']:.3f} (n={s['n']})"


def _table(title: str, headers: list[str], rows: list[list]) -> None:
    print(f"\n# {title}\n")
    print("| " + " | ".join(headers) + " |")
    print("| " + " | ".join("---" for _ in headers) + " |")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def print_tables(out: dict) -> None:
    """The parts measured, one table each; time cells are median / max seconds (n samples)."""
    if "formation" in out:
        rows = []
        for n, row in out["formation"].items():
            local = row.get("local")
            cells = [_cell(local[k]) for k in ("full_view", "start_returned", "last_start_to_view")] if local else []
            rows.append([n, _cell(row["sim"]), *(cells or ["-", "-", "-"])])
        _table(
            "Formation: launch to full view",
            ["nodes", "sim", "local: full view", "local: start() returned", "local: last node_start to full view"],
            rows,
        )
    if "fd" in out:
        rows = [
            [backend, f"{fd:g}", _cell(r["suspect"]), _cell(r["excluded"])]
            for backend, by_fd in out["fd"].items()
            for fd, r in by_fd.items()
        ]
        _table(
            "Failure detection: kill to suspect and to exclusion",
            ["backend", "fd_timeout", "suspect", "excluded"],
            rows,
        )
    if "merge" in out:
        rows = [
            [
                b,
                _cell(r["heal_to_merged_view"]),
                _cell(r["merged_view_to_sync"]),
                f"{r['passed']}/{r['runs']}",
                r["merged_runs"],
            ]
            for b, r in out["merge"].items()
        ]
        _table(
            "Heal to merged view (one-way partition A->B for 6 s)",
            [
                "backend",
                "heal -> merged view",
                "merged view -> windows in sync",
                "runs passed",
                "runs with views to merge",
            ],
            rows,
        )
    if "overhead" in out:
        rows = [
            [backend, n, f"{r['msgs_per_s_per_node']:.1f}", f"{r['frames_per_s_per_node']:.1f}"]
            for n, row in out["overhead"].items()
            for backend, r in row.items()
        ]
        _table("GMS overhead, idle cluster", ["backend", "nodes", "msgs/s per node", "frames/s per node"], rows)


@recorded(
    "bench_gms",
    goals={
        "Formation": f"3 local nodes reach their full view within {FORMATION_GOAL_S:g} s of launch",
        "Failure detection": "a killed member is excluded within fd_timeout plus one heartbeat and one view round",
        "Heal to merged view": "one merged view, and every window pair in sync, soon after the heal",
        "GMS overhead": "heartbeats dominate: (N - 1) / heartbeat_interval per node",
    },
)
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 seeds, 1 run, fewer sizes")
    ap.add_argument("--parts", default="formation,fd,merge,overhead")
    ap.add_argument("--seeds", type=int, default=20, help="simulator seeds per case")
    ap.add_argument("--runs", type=int, default=3, help="local runs per case")
    ap.add_argument("--sizes", default="3,5,10")
    ap.add_argument("--fd-timeouts", default="1,2,4")
    ap.add_argument("--no-local", action="store_true", help="simulator only")
    ap.add_argument("--docker", action="store_true", help="also time the merge on docker (iptables)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.runs = 3, 1
    parts = set(args.parts.split(","))
    sizes = [int(x) for x in args.sizes.split(",")]
    fds = [float(x) for x in args.fd_timeouts.split(",")]
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-gms-") as tmpdir:
        tmp = Path(tmpdir)
        if "formation" in parts:
            out["formation"] = {}
            for n in sizes:
                row = {"sim": formation_sim(n, args.seeds)}
                if not args.no_local:
                    row["local"] = formation_local(n, args.runs, tmp)
                out["formation"][n] = row
                line = f"formation {n:2d} nodes: sim {_fmt(row['sim'])}"
                if "local" in row:
                    local = row["local"]
                    line += (
                        f"; local full view {_fmt(local['full_view'])}, start() {_fmt(local['start_returned'])}, "
                        f"last node_start to full view {_fmt(local['last_start_to_view'])}"
                    )
                print(line, flush=True)
        if "fd" in parts:
            out["fd"] = {"sim": fd_sim(fds, args.seeds)}
            if not args.no_local:
                out["fd"]["local"] = fd_local(fds, args.runs, tmp)
            for backend, rows in out["fd"].items():
                for fd, r in rows.items():
                    print(
                        f"fd {backend} fd_timeout={fd:g}: suspect {_fmt(r['suspect'])}; excluded {_fmt(r['excluded'])}",
                        flush=True,
                    )
        if "merge" in parts:
            out["merge"] = {"sim": merge_sim(args.seeds)}
            if not args.no_local:
                out["merge"]["local"] = merge_local(args.runs, tmp)
            if args.docker:
                out["merge"]["docker"] = merge_local(args.runs, tmp, backend="docker")
            for backend, r in out["merge"].items():
                print(
                    f"merge {backend}: heal->merged view {_fmt(r['heal_to_merged_view'])}; "
                    f"merged view->windows in sync {_fmt(r['merged_view_to_sync'])}; "
                    f"{r['passed']}/{r['runs']} runs passed every check, {r['merged_runs']} had views to merge",
                    flush=True,
                )
        if "overhead" in parts:
            out["overhead"] = {}
            for n in (5, 10):
                row = {"sim": overhead_sim(n)}
                if not args.no_local:
                    row["local"] = overhead_local(n, tmp)
                out["overhead"][n] = row
                for backend, r in row.items():
                    print(
                        f"overhead {backend} {n} nodes idle: {r['msgs_per_s_per_node']:.1f} msgs/s per node, "
                        f"{r['frames_per_s_per_node']:.1f} frames/s per node",
                        flush=True,
                    )
    print_tables(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
