"""The generic nemesis: a run drawn from the fault vocabulary only (pure: seeded, no I/O, no clock).

A run is a *plan*: a duration, a workload (streams as a scenario file writes them) and a list of
faults, each a step kind with a start, a length and the body a scenario file gives that step. The
plan becomes a scenario schedule by `to_schedule`: every fault with a length ends by its own undo
(a heal, a resume, a restart, a view giving the node its full membership back), and every undo
falls at the latest at the final heal, so the run ends with every link up and every node running.

Nothing here knows a protocol: what may be dropped by type, whether streams multicast and whether
the admin sync step is accepted come from a harness.explore.vocab.Vocabulary, which the registry
fills in. Plans are plain JSON-able dicts, so they travel to worker processes and Spark tasks.

`mutate` changes a plan by one small edit (add, remove, shift, stretch or retarget a fault; change
the workload): what the guided search (harness.explore.search) does to a run that showed
something new.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from splitbrain.harness.explore.vocab import Vocabulary

NETWORK = ("partition", "loss", "duplicate", "reorder", "delay")
LIFECYCLE = ("pause", "kill", "restart")
KINDS = (*NETWORK, "drop", *LIFECYCLE, "view", "sync")
# The last fault ends this long before the workload's end.
HEAL_MARGIN_S = 0.5
DURATIONS_S = (6.0, 8.0, 10.0, 14.0, 20.0)
RATES = (10, 20, 50, 100)
MAX_FAULTS = 12
_EPS = 0.01


def kinds(vocab: Vocabulary) -> tuple[str, ...]:
    """The fault kinds this vocabulary allows."""
    out = [*NETWORK, "drop", "pause"]
    if vocab.restarts:
        out += ["kill", "restart"]
    if vocab.views:
        out.append("view")
    if vocab.admin_sync:
        out.append("sync")
    if vocab.only is not None:
        out = [k for k in out if k in vocab.only]
    return tuple(out)


# ---- drawing ----------------------------------------------------------------------------------


def draw(rng: random.Random, vocab: Vocabulary, duration: float | None = None) -> dict:
    """A fresh plan: a duration, a workload sized to it and 1-6 faults."""
    if duration is None:
        duration = rng.choice(vocab.durations or DURATIONS_S)
    plan: dict[str, Any] = {"duration": duration, "workload": draw_workload(rng, vocab, duration), "faults": []}
    for _ in range(rng.randint(1, 6)):
        plan["faults"].append(draw_fault(rng, vocab, duration))
    return plan


def draw_workload(rng: random.Random, vocab: Vocabulary, duration: float) -> list[dict]:
    nodes = vocab.nodes
    every = [(a, b) for a in nodes for b in nodes if a != b]
    if vocab.multicast and not (vocab.pairs and rng.random() < 0.5):
        senders = rng.sample(nodes, rng.randint(1, len(nodes)))
        pairs = [(s, "all") for s in senders]
    else:
        pairs = rng.sample(every, rng.randint(1, min(4, len(every))))
    return [draw_stream(rng, src, dst, duration) for src, dst in pairs]


def draw_stream(rng: random.Random, src: str, dst: str, duration: float) -> dict:
    """One stream that fits in the run: a count (its last message has no successor) or a span."""
    rate = rng.choice(RATES)
    start = round(rng.uniform(0.0, duration / 3), 2)
    room = duration - start - 0.05
    if rng.random() < 0.5:
        most = max(1, int(room * rate))
        count = max(1, min(most, rng.choice([1, 3, 10, 20, 50, 200])))
        return {"from": src, "to": dst, "rate": rate, "count": count, "start": start}
    span = round(rng.uniform(min(1.0, room), room), 2)
    return {"from": src, "to": dst, "rate": rate, "duration": max(0.05, span), "start": start}


def draw_fault(rng: random.Random, vocab: Vocabulary, duration: float, kind: str | None = None) -> dict:
    """One fault of `kind` (default: any the vocabulary allows) somewhere in the run."""
    kind = kind or rng.choice(kinds(vocab))
    last = duration - HEAL_MARGIN_S
    at = round(rng.uniform(0.0, max(0.0, last - 0.1)), 2)
    length = None if kind in ("restart", "sync") else round(rng.uniform(0.1, min(6.0, last - at)), 2)
    return {"kind": kind, "at": at, "length": length, "body": draw_body(rng, vocab, kind)}


def draw_body(rng: random.Random, vocab: Vocabulary, kind: str) -> Any:
    """The step body a scenario file gives a fault of `kind`, on nodes and links drawn here."""
    nodes = list(vocab.nodes)
    if kind == "partition":
        if rng.random() < 0.5:  # one-way: some nodes to some others
            src = rng.sample(nodes, rng.randint(1, len(nodes) - 1))
            rest = [n for n in nodes if n not in src]
            dst = rng.sample(rest, rng.randint(1, len(rest)))
            return {"from": _one(src), "to": _one(dst)}
        side = rng.sample(nodes, rng.randint(1, len(nodes) - 1))
        return [sorted(side), sorted(n for n in nodes if n not in side)]
    if kind in ("loss", "duplicate"):
        p = rng.choice([0.05, 0.2, 0.5, 0.9, 1.0] if kind == "loss" else [0.05, 0.2, 0.5])
        return {"link": _link(rng, nodes), "p": p}
    if kind == "reorder":
        return {"link": _link(rng, nodes), "p": rng.choice([0.1, 0.3, 0.6]), "ms": rng.choice([5, 20, 100])}
    if kind == "delay":
        ms = rng.choice([5, 50, 200, 1000, 3000])
        return {"link": _link(rng, nodes), "ms": ms, "jitter_ms": round(ms * rng.choice([0, 0.1, 0.5, 0.9]), 1)}
    if kind == "drop":
        at, peer = rng.sample(nodes, 2)
        body: dict[str, Any] = {"at": at}
        down = rng.random() < 0.3
        body["to" if down else "from"] = peer
        if down:
            body["direction"] = "down"
        if vocab.message_types:
            body["type"] = rng.choice(vocab.message_types)
        body["count"] = rng.choice([1, 1, 2, 3, 5, 20])
        if rng.random() < 0.3:
            body["after"] = rng.randint(1, 20)
        action = rng.choice(["drop", "drop", "delay", "duplicate"])
        if action != "drop":
            body["action"] = action
        if action == "delay":
            body["delay_ms"] = rng.choice([100, 500, 1500, 4000])
        return body
    if kind == "view":
        at = rng.choice(nodes)
        others = [n for n in nodes if n != at]
        gone = set(rng.sample(others, rng.randint(1, len(others))))
        return {"at": at, "members": [n for n in nodes if n not in gone]}
    if kind == "sync":
        at, peer = rng.sample(nodes, 2)
        return {"at": at, "peer": peer}
    if kind in LIFECYCLE:
        return rng.choice(nodes)
    raise ValueError(f"unknown fault kind {kind!r}")


def _one(names: list[str]) -> Any:
    return names[0] if len(names) == 1 else sorted(names)


def _link(rng: random.Random, nodes: list[str]) -> str:
    a, b = rng.sample(nodes, 2)
    return rng.choice([f"{a}->{b}", f"{a}->{b}", f"{a}<->{b}", "*"])


# ---- the plan as a schedule -------------------------------------------------------------------


def _node_of(fault: dict) -> str | None:
    body = fault["body"]
    if fault["kind"] in LIFECYCLE:
        return body
    if fault["kind"] in ("drop", "view", "sync"):
        return body["at"]
    return None


def _end(fault: dict, heal_at: float) -> float:
    at = float(fault["at"])
    if fault["length"] is None:
        return at
    return round(max(at + _EPS, min(heal_at, at + float(fault["length"]))), 2)


def to_schedule(plan: dict, nodes: tuple[str, ...]) -> list[dict]:
    """The plan as a scenario schedule (file form, `heal: N` by index), faults that would clash
    with a node's lifecycle left out (two lifecycle faults overlapping on one node; a drop, view
    or sync at a node that is dead then), every fault undone by the final heal."""
    heal_at = round(float(plan["duration"]) - HEAL_MARGIN_S, 2)
    faults = sorted(plan["faults"], key=lambda f: float(f["at"]))
    # Lifecycle faults first: they decide when a node is dead.
    busy: dict[str, list[tuple[float, float]]] = {n: [] for n in nodes}
    dead: dict[str, list[tuple[float, float]]] = {n: [] for n in nodes}
    kept: list[dict] = []
    for f in faults:
        if f["kind"] not in LIFECYCLE or float(f["at"]) >= heal_at:
            continue
        node, t0, t1 = f["body"], float(f["at"]), _end(f, heal_at)
        if any(a - _EPS <= t1 and t0 <= b + _EPS for a, b in busy[node]):
            continue
        busy[node].append((t0, t1))
        if f["kind"] == "kill":
            dead[node].append((t0, t1))
        kept.append(f)

    def is_dead(node: str, t: float) -> bool:
        return any(a - _EPS <= t <= b + _EPS for a, b in dead[node])

    views: dict[str, list[tuple[float, float]]] = {n: [] for n in nodes}
    for f in faults:
        if f["kind"] in LIFECYCLE or float(f["at"]) >= heal_at:
            continue
        node, t0, t1 = _node_of(f), float(f["at"]), _end(f, heal_at)
        if node is not None and (is_dead(node, t0) or (f["kind"] == "view" and is_dead(node, t1))):
            continue
        if f["kind"] == "view":
            # One injected view at a time per node, each ended by the full view.
            if node is None or any(a - _EPS <= t1 and t0 <= b + _EPS for a, b in views[node]):
                continue
            views[node].append((t0, t1))
        kept.append(f)
    # One entry per step: (time, order within the instant, step); undo steps refer to their fault.
    entries: list[tuple[float, int, int, dict, int | None]] = []
    for k, f in enumerate(kept):
        kind, at, body = f["kind"], float(f["at"]), copy.deepcopy(f["body"])
        entries.append((at, 1, k, {"at": at, kind: body}, None))
        if f["length"] is None:
            continue
        end = _end(f, heal_at)
        if kind in (*NETWORK, "drop"):
            entries.append((end, 0, k, {"at": end, "heal": None}, k))
        elif kind == "view":
            entries.append((end, 2, k, {"at": end, "view": {"at": body["at"], "members": list(nodes)}}, None))
        elif kind == "pause":
            entries.append((end, 0, k, {"at": end, "resume": body}, None))
        elif kind == "kill":
            entries.append((end, 0, k, {"at": end, "restart": body}, None))
    entries.sort(key=lambda e: (e[0], e[1], e[2]))
    index_of: dict[int, int] = {}
    steps: list[dict] = []
    for at, order, k, step, undoes in entries:
        if order == 1:
            index_of[k] = len(steps)
        if undoes is not None:
            step["heal"] = index_of[undoes]
        step["at"] = round(at, 2)
        steps.append(step)
    return steps


def to_scenario(plan: dict, vocab: Vocabulary, *, name: str, protocol: str, config: dict, seed: int) -> dict:
    """A scenario dict (for harness.scenario.parse_scenario) that runs the plan."""
    return {
        "name": name,
        "protocol": protocol,
        "nodes": list(vocab.nodes),
        "config": dict(config),
        "workload": copy.deepcopy(plan["workload"]),
        "schedule": to_schedule(plan, vocab.nodes),
        "duration": plan["duration"],
        "settle": vocab.settle_s,
        "seed": seed,
    }


# ---- mutation ---------------------------------------------------------------------------------

MUTATIONS = ("add", "remove", "shift", "stretch", "retarget", "workload", "align", "splice")


def mutate(rng: random.Random, vocab: Vocabulary, plan: dict, edits: int = 1, donor: dict | None = None) -> dict:
    """A copy of `plan` changed by `edits` small edits (module docstring); `donor`, another plan,
    lends a fault to a splice."""
    out = copy.deepcopy(plan)
    for _ in range(edits):
        _edit(rng, vocab, out, donor)
    return out


def _edges(plan: dict) -> list[float]:
    """The instants where the workload changes: each stream's first and last message, and the
    start and end of every fault. Delivery protocols are most fragile at these edges (the last
    message of a stream has no successor to reveal its loss; a fault that begins or ends as a
    stream does cuts it at its most exposed message)."""
    out = []
    for s in plan["workload"]:
        start = float(s.get("start", 0.0))
        rate = float(s.get("rate", 1)) or 1.0
        span = float(s["duration"]) if "duration" in s else (float(s.get("count", 1)) - 1) / rate
        out += [start, start + span]
    for f in plan["faults"]:
        out.append(float(f["at"]))
        if f["length"] is not None:
            out.append(float(f["at"]) + float(f["length"]))
    return out


def _edit(rng: random.Random, vocab: Vocabulary, plan: dict, donor: dict | None = None) -> None:
    faults = plan["faults"]
    duration = float(plan["duration"])
    last = duration - HEAL_MARGIN_S
    what = rng.choice(MUTATIONS)
    if what == "splice" and donor is not None and donor["faults"] and len(faults) < MAX_FAULTS:
        # Another corpus plan lends one of its faults, at its own time: two runs that each
        # reached something new may reach more together.
        lent = copy.deepcopy(rng.choice(donor["faults"]))
        lent["at"] = round(min(last - 0.1, float(lent["at"])), 2)
        faults.append(lent)
        return
    if what == "align" and faults:
        # A fault starts (or ends) just before or after an edge of the workload or of another fault.
        f = rng.choice(faults)
        edge = rng.choice(_edges(plan)) + rng.choice([-0.2, -0.05, 0.0, 0.05, 0.2])
        if f["length"] is not None and rng.random() < 0.5:
            f["length"] = round(max(0.05, min(last, edge) - float(f["at"])), 2)
        else:
            f["at"] = round(min(last - 0.1, max(0.0, edge)), 2)
        return
    if what in ("add", "splice", "align") or not faults:
        if len(faults) < MAX_FAULTS:
            new = draw_fault(rng, vocab, duration)
            if faults and rng.random() < 0.5:
                # Near another fault: what a bug needs is often two faults close in time.
                new["at"] = round(min(last - 0.1, max(0.0, float(rng.choice(faults)["at"]) + rng.uniform(-1, 1))), 2)
            faults.append(new)
        return
    f = rng.choice(faults)
    if what == "remove":
        faults.remove(f)
    elif what == "shift":
        f["at"] = round(min(last - 0.1, max(0.0, float(f["at"]) + rng.gauss(0, 1.0))), 2)
    elif what == "stretch" and f["length"] is not None:
        f["length"] = round(max(0.05, float(f["length"]) * rng.choice([0.25, 0.5, 2.0, 4.0])), 2)
    elif what == "retarget":
        f["body"] = draw_body(rng, vocab, f["kind"])
    elif what == "workload":
        _edit_workload(rng, vocab, plan)


def _edit_workload(rng: random.Random, vocab: Vocabulary, plan: dict) -> None:
    streams = plan["workload"]
    duration = float(plan["duration"])
    i = rng.randrange(len(streams))
    choice = rng.random()
    if choice < 0.3 and len(streams) < 6:
        fresh = draw_workload(rng, vocab, duration)
        streams.append(rng.choice(fresh))
    elif choice < 0.45 and len(streams) > 1:
        del streams[i]
    else:
        s = streams[i]
        streams[i] = draw_stream(rng, s["from"], s["to"], duration)
