"""GMS timings on the simulator, per seed: failure detection versus fd_timeout, heal to one merged
view, merged view to every UNICAST3 window pair in sync, and heartbeat/merge overhead per node.

- detection: 3 nodes, C killed at 3 s; time until A and B both installed a view without C;
- one-way partition A->B from 3 s to 9 s with traffic A<->B and C<->A during it (50 msgs/s each
  way, streams end at the heal): heal -> every node in one full view, and heal -> every window
  pair in sync (node.views.pair_problem on the layers' windows(), polled every 10 ms);
- overhead: GMS messages sent per second per node in a steady group of 5 and 10 nodes (no app
  traffic), from the layers' tx_<TYPE> counters over 10 s.

Run: .venv/bin/python benchmarks/bench_gms_sim.py [--seeds 20]
"""

from __future__ import annotations

import argparse
import statistics

from benchresults import Results, add_json_option  # benchmarks/, the script's own directory

from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim.simulator import Simulation
from splitbrain.node.compose import protocol_layers
from splitbrain.node.views import pair_problem

POLL_S = 0.01


def scenario(nodes, *, schedule=(), workload=(), duration=10.0, config=None):
    return parse_scenario(
        {
            "name": "bench-gms",
            "protocol": "unicast3",
            "membership": "gms",
            "nodes": nodes,
            "duration": duration,
            "settle": 0,
            "workload": list(workload),
            "schedule": list(schedule),
            "config": config or {},
        }
    )


def stepper(sc, seed):
    """A started Simulation and a function that runs it to time t, applying due steps and streams."""
    sim = Simulation(sc, seed)
    sim.start()
    steps = {s.index: s for s in sc.schedule}
    todo = sorted(
        [(s.at, 0, i, s) for i, s in enumerate(sc.schedule)] + [(s.start, 1, i, s) for i, s in enumerate(sc.streams)]
    )

    def run_to(t: float) -> None:
        while todo and todo[0][0] <= t:
            at, kind, _i, item = todo.pop(0)
            sim.advance(at)
            if kind == 0:
                sim.apply_step(item, steps)
            else:
                sim.add_stream(item)
        sim.advance(t)

    return sim, run_to


def agreed(sim, names) -> bool:
    ms = [sim.membership(n) for n in names]
    return (
        all(m is not None for m in ms)
        and len({(m.view_id, m.members) for m in ms}) == 1
        and set(ms[0].members) == set(names)
    )


def windows_in_sync(sim, names) -> bool:
    wins = {}
    for n in names:
        for layer in protocol_layers(sim.nodes[n].live_stack):
            if layer.busy():
                return False
            for w in layer.windows():
                wins[(n, w.peer, w.side)] = w.to_dict()
    for (n, peer, side), w in wins.items():
        if side == "send" and pair_problem(n, peer, w, wins.get((peer, n, "recv"))):
            return False
    return True


def first(sim, run_to, start, end, pred) -> float | None:
    t = start
    while t <= end:
        run_to(t)
        if pred():
            return t
        t = round(t + POLL_S, 6)
    return None


def detection(seed: int, fd_timeout: float) -> float:
    sc = scenario(3, schedule=[{"at": 3, "kill": "C"}], config={"fd_timeout": fd_timeout}, duration=3 + 4 * fd_timeout)
    sim, run_to = stepper(sc, seed)
    run_to(3.0)
    t = first(sim, run_to, 3.0, 3 + 4 * fd_timeout, lambda: agreed(sim, ("A", "B")))
    assert t is not None
    return t - 3.0


def heal(seed: int) -> tuple[float, float]:
    workload = [
        {"from": a, "to": b, "rate": 50, "duration": 9} for a, b in (("A", "B"), ("B", "A"), ("C", "A"), ("A", "C"))
    ]
    sc = scenario(
        3,
        schedule=[{"at": 3, "partition": {"from": "A", "to": "B"}}, {"at": 9, "heal": 0}],
        workload=workload,
        duration=30,
    )
    sim, run_to = stepper(sc, seed)
    run_to(9.0)
    merged = first(sim, run_to, 9.0, 30.0, lambda: agreed(sim, sc.nodes))
    assert merged is not None
    sim2, run_to2 = stepper(sc, seed)
    run_to2(9.0)
    synced = first(sim2, run_to2, 9.0, 30.0, lambda: windows_in_sync(sim2, sc.nodes))
    assert synced is not None
    return merged - 9.0, synced - 9.0


def overhead(n: int, seed: int = 1) -> float:
    sc = scenario(n, duration=20)
    sim, run_to = stepper(sc, seed)

    def sent() -> int:
        return sum(
            v
            for name in sc.nodes
            for layer in sim.nodes[name].live_stack.layers
            if layer.proto == "gms"
            for k, v in getattr(layer, "counters", {}).items()
            if k.startswith("tx_")
        )

    run_to(5.0)
    before = sent()
    run_to(15.0)
    return (sent() - before) / 10.0 / n


def show(label: str, xs: list[float], rows: list[list]) -> None:
    print(f"{label}: median {statistics.median(xs):.3f} s, max {max(xs):.3f} s, min {min(xs):.3f} s (n={len(xs)})")
    rows.append([label, f"{statistics.median(xs):.3f}", f"{max(xs):.3f}", f"{min(xs):.3f}", len(xs)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    add_json_option(parser)
    args = parser.parse_args(argv)
    results = Results("bench_gms_sim", argv)
    seeds = range(1, args.seeds + 1)
    detect: list[list] = []
    for fd in (1.0, 2.0, 4.0):
        show(f"kill -> view without it, fd_timeout={fd}", [detection(s, fd) for s in seeds], detect)
    headers = ["what", "median s", "max s", "min s", "seeds"]
    results.table(
        "Failure detection (simulator)",
        headers,
        detect,
        goal="a killed member leaves every view within fd_timeout plus one heartbeat and one view round",
        note="3 nodes, C killed at 3 s; until A and B both installed a view without C.",
    )
    heals = [heal(s) for s in seeds]
    merge: list[list] = []
    show("one-way A->B 6 s: heal -> one merged view", [m for m, _ in heals], merge)
    show("one-way A->B 6 s: heal -> all windows in sync", [w for _, w in heals], merge)
    show("merged view -> windows in sync (negative: in sync first)", [w - m for m, w in heals], merge)
    results.table(
        "Heal to one view (simulator)",
        headers,
        merge,
        goal="a 6 s one-way partition heals into one view, and every window pair syncs, within 10 s",
        note="A->B cut from 3 s to 9 s with traffic A<->B and C<->A (50 msgs/s each way).",
    )
    cost: list[list] = []
    for n in (5, 10):
        per_node = overhead(n)
        print(f"overhead, {n} nodes steady: {per_node:.1f} GMS messages/s sent per node")
        cost.append([n, f"{per_node:.1f}"])
    results.table(
        "GMS overhead (simulator)",
        ["nodes", "GMS messages/s sent per node"],
        cost,
        goal="heartbeats dominate: (N - 1) / heartbeat_interval per node in a steady group",
        note="No application traffic; counted from the layers' tx counters over 10 s.",
    )
    results.write(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
