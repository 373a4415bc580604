"""The chaos set that the mutation campaign (harness.mutants) runs every planted mutant and the
unmutated protocol against.

A chaos set is a function of a seed (`chaos_scenario(seed, protocol)`) drawn from the protocol's
spec (`ProtocolSpec.chaos`, a node.protocols.ChaosSet: data, so this module names no protocol):
3 nodes with streams for 10-20 s (unicast both ways, or one multicast stream per node), and a
random fault schedule of partitions (one-way and two-way, healed), loss, duplication, reordering,
delay with jitter, in-process typed drops of the spec's `chaos_drop_types` with a count, and as the
set says: the first messages of a stream lost (the UNICAST3 design), restarts (some late, after the heals)
and kills, an asymmetric split where the receiver drops the sender from its view (the SYNC design), a
stale ACK delayed past a resync (JGRP-1875), admin syncs where the scenario model has them, and
connection lifetimes kept longer than the disturbances. UNICAST3's set has all of these but the
first-messages loss, small conn_expiry/conn_close timeouts, and a resync
mode per seed (`sync` or `timestamp`; `first_seqno` is JGRP-1875 itself and would fail
unmutated); a mutant whose bug sits on one mode's path (the spec's mutation_settings) runs every
seed in that mode. A set may make a share of its seeds lossless (concurrent senders on links with a
constant delay and no fault) and judge them by xmit_traffic at xmit_bound 0 (MCAST's).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Iterable
from typing import Any

from splitbrain.node import protocols
from splitbrain.node.protocols import ChaosSet

NODES = ("A", "B", "C")
SETTLE_S = 12.0
# A view episode owns its pair of nodes from this long before it starts until this long after it heals.
EPISODE_GUARD_S = 3.0
# Lossless seeds (ChaosSet.lossless_share): the workload's time budget is this share of the
# seed's duration, with two streams per node at these rates: a sender sends again within the
# few milliseconds a preempted thread (MCAST's seqno_outside_lock) holds a message back.
LOSSLESS_SHARE_OF_DURATION = 0.2
LOSSLESS_RATES = (150, 200, 300)


def hunted() -> tuple[str, ...]:
    """The protocols with a chaos set (`splitbrain mutants --protocol`)."""
    return tuple(name for name in protocols.names() if protocols.get(name).chaos is not None)


def chaos_of(protocol: str) -> ChaosSet:
    chaos = protocols.get(protocol).chaos
    if chaos is None:
        raise ValueError(f"protocol {protocol!r} has no chaos set (hunted: {', '.join(hunted())})")
    return chaos


def mutations(protocol: str = protocols.DEFAULT_PROTOCOL) -> dict[str, str]:
    """The planted bugs the hunt runs for a protocol: name -> what it breaks."""
    return dict(protocols.get(protocol).mutations)


def chaos_modes(protocol: str = protocols.DEFAULT_PROTOCOL) -> tuple[str, ...]:
    return chaos_of(protocol).modes


def admin_sync_available() -> bool:
    """True when the scenario model has the admin SYNC step (`sync: {at: B, peer: A}`)."""
    from splitbrain.harness.scenario import STEP_KINDS

    return "sync" in STEP_KINDS


def mutant_mode(name: str | None, protocol: str = protocols.DEFAULT_PROTOCOL) -> str | None:
    """The mode (the chaos set's mode_key: UNICAST3's resync) a mutant needs, or None when any mode
    shows its bug."""
    spec = protocols.get(protocol)
    key = spec.chaos.mode_key if spec.chaos is not None else None
    if not name or key is None:
        return None
    return spec.mutation_settings.get(name, {}).get(key)


# ---- the chaos set ----------------------------------------------------------------------------


class _Schedule:
    """A schedule as written in a file: steps in creation order, `heal: N` by that order."""

    def __init__(self) -> None:
        self.steps: list[dict] = []

    def add(self, at: float, kind: str, body) -> int:
        self.steps.append({"at": round(at, 2), kind: body})
        return len(self.steps) - 1

    def heal(self, at: float, index: int) -> None:
        self.add(at, "heal", index)


class _Busy:
    """Intervals during which a pair of nodes belongs to a view episode."""

    def __init__(self) -> None:
        self.spans: list[tuple[frozenset, float, float]] = []

    def free(self, pair, t0: float, t1: float) -> bool:
        key = frozenset(pair)
        return not any(k == key and t0 < b and a < t1 for k, a, b in self.spans)

    def claim(self, pair, t0: float, t1: float) -> None:
        self.spans.append((frozenset(pair), t0, t1))


def _pairs_of_link(link: str) -> list[tuple[str, str]]:
    if link == "*":
        return [(a, b) for a in NODES for b in NODES if a < b]
    a, _, b = link.replace("<->", "->").partition("->")
    return [(a, b)]


def _link(rng: random.Random) -> str:
    a, b = rng.sample(NODES, 2)
    return rng.choice([f"{a}->{b}", f"{a}<->{b}", "*"])


def chaos_scenario(
    seed: int, protocol: str = protocols.DEFAULT_PROTOCOL, *, mode: str | None = None, admin_sync: bool | None = None
) -> dict:
    """The protocol's chaos set for `seed` (a dict for harness.scenario.parse_scenario), drawn from
    its spec's ChaosSet.

    `mode` forces a mode (default: the seed's own); `admin_sync` adds admin SYNC steps (default:
    when the scenario model has them). The schedule depends on the seed only, so a forced mode
    runs the same faults; admin syncs are drawn last, in the set's admin_sync_mode only."""
    spec = protocols.get(protocol)
    chaos = chaos_of(protocol)
    rng = random.Random(f"splitbrain-chaos:{seed}")
    drawn = rng.choice(chaos.modes) if chaos.modes else None
    if mode is not None:
        drawn = mode
    duration = round(rng.uniform(10.0, 20.0), 1)
    config: dict[str, Any] = dict(chaos.settings)
    for key, choices in chaos.draws.items():
        config[key] = rng.choice(choices)
    if chaos.mode_key is not None:
        config[chaos.mode_key] = drawn
    if chaos.lossless_share > 0 and rng.random() < chaos.lossless_share:
        return _lossless(seed, protocol, config, rng, round(duration * LOSSLESS_SHARE_OF_DURATION, 1))
    if chaos.membership is not None and chaos.membership_share > 0 and rng.random() < chaos.membership_share:
        return _with_membership(seed, protocol, chaos.membership, config, rng, duration)

    # Streams both ways between A and B, and to and from C most of the time (a multicast protocol:
    # one multicast stream per node). Some end early, so their connections idle, expire and get
    # reaped, and their last messages have no successor.
    workload: list[dict[str, Any]] = []
    if spec.multicast:
        pairs = [(node, "all") for node in NODES]
    else:
        pairs = [("A", "B"), ("B", "A")] + [
            p for p in (("A", "C"), ("C", "A"), ("B", "C"), ("C", "B")) if rng.random() < 0.5
        ]
    for src, dst in pairs:
        start = round(rng.uniform(0.0, 2.0), 2)
        end = duration if rng.random() < 0.6 else round(rng.uniform(duration * 0.4, duration), 2)
        workload.append(
            {
                "from": src,
                "to": dst,
                "rate": rng.choice([20, 40, 60, 100]),
                "start": start,
                "duration": round(end - start, 2),
            }
        )

    s = _Schedule()
    last = duration - 1.0  # faults start and heal before the workload ends
    if rng.random() < 0.6:
        # Jitter stays below the delay: a frame floored at zero latency lands at the very instant
        # it was sent, and the merged log cannot order it after the send (see docs/mutation.md).
        ms = rng.choice([1, 5, 20, 40])
        s.add(0.0, "delay", {"link": "*", "ms": ms, "jitter_ms": round(ms * rng.choice([0, 0.1, 0.5, 0.9]), 1)})

    # The view episodes come first and own their pair of nodes for a while: Y drops X from its
    # view, so Y's *send* window to X closes too and is reaped after conn_close_timeout with
    # whatever it holds unacked, by design. Another fault on that pair just before or during the
    # episode (a partition eating Y's last messages to X) would make that a designed loss.
    episodes = []
    close_s = config.get("conn_close_timeout", 0.0)
    if chaos.view_episodes and rng.random() < 0.5:
        # The SYNC design's asymmetric split: nothing from X reaches Y, Y drops X from its view and closes
        # its window for X after conn_close_timeout; at the heal Y takes X back and resyncs.
        x, y = rng.sample(NODES, 2)
        t = rng.uniform(1.0, max(1.5, last - 4.0))
        episodes.append(("split", x, y, t, close_s + rng.uniform(0.2, 2.0), 0.0))
    if chaos.view_episodes and rng.random() < 0.4:
        # JGRP-1875: Y's last ACK before a split reaches X only after Y lost its window for X and
        # resynced, so it is stale; the same split as above, on A->B or B->A (whose streams run).
        x, y = rng.choice([("A", "B"), ("B", "A")])
        t = rng.uniform(2.0, max(2.5, last - 4.0))
        length = close_s + 0.1 + config["xmit_interval"] + rng.uniform(0.2, 0.8)
        episodes.append(("jgrp1875", x, y, t, length, length + rng.uniform(0.1, 0.4)))
    busy = _Busy()
    for kind, x, y, t, length, delay_s in episodes:
        if not busy.free((x, y), t - EPISODE_GUARD_S, t + length + EPISODE_GUARD_S):
            continue
        busy.claim((x, y), t - EPISODE_GUARD_S, t + length + EPISODE_GUARD_S)
        if kind == "jgrp1875":
            s.add(
                t,
                "drop",
                {
                    "at": x,
                    "from": y,
                    "type": chaos.stale_ack_type,
                    "count": 1,
                    "action": "delay",
                    "delay_ms": round(delay_s * 1000),
                },
            )
        i = s.add(t, "partition", {"from": x, "to": y})
        s.add(t + 0.1, "view", {"at": y, "members": [n for n in NODES if n != x]})
        s.heal(t + length, i)
        s.add(t + length, "view", {"at": y, "members": list(NODES)})

    def place(nodes_of, lo: float, hi: float, length_of, until: float = last) -> tuple[float, float] | None:
        """A start and end (by `until`) for a fault on the pairs of `nodes_of`, clear of the episodes."""
        for _ in range(5):
            t = rng.uniform(lo, hi)
            t_end = max(t, min(until, t + length_of()))
            if all(busy.free(pair, t, t_end) for pair in nodes_of):
                return t, t_end
        return None

    for _ in range(rng.randint(0, 2)):  # loss bursts
        link = _link(rng)
        spot = place(_pairs_of_link(link), 0.5, last - 1.0, lambda: rng.uniform(1.0, 4.0))
        if spot:
            i = s.add(spot[0], "loss", {"link": link, "p": rng.choice([0.05, 0.1, 0.2, 0.3])})
            s.heal(spot[1], i)
    if rng.random() < 0.5:
        link = _link(rng)
        spot = place(_pairs_of_link(link), 0.5, last - 1.0, lambda: rng.uniform(1.0, 5.0))
        if spot:
            i = s.add(spot[0], "duplicate", {"link": link, "p": rng.choice([0.05, 0.1, 0.2])})
            s.heal(spot[1], i)
    if rng.random() < 0.5:
        link = _link(rng)
        spot = place(_pairs_of_link(link), 0.5, last - 1.0, lambda: rng.uniform(1.0, 5.0))
        if spot:
            i = s.add(
                spot[0], "reorder", {"link": link, "p": rng.choice([0.1, 0.2, 0.3]), "ms": rng.choice([5, 20, 50])}
            )
            s.heal(spot[1], i)
    for _ in range(rng.randint(0, 2)):  # partitions, one-way or two-way, healed
        a, b = rng.sample(NODES, 2)
        one_way = rng.random() < 0.5
        pairs = [(a, b)] if one_way else [(a, n) for n in NODES if n != a]
        spot = place(pairs, 0.5, last - 0.5, lambda: rng.uniform(0.3, 3.0))
        if spot:
            i = s.add(spot[0], "partition", {"from": a, "to": b} if one_way else [[a], [n for n in NODES if n != a]])
            s.heal(spot[1], i)
    for _ in range(rng.randint(0, 3)):  # typed drops with a count
        a, b = rng.sample(NODES, 2)
        mtype = rng.choice(spec.chaos_drop_types)
        spot = place([(a, b)], 0.5, last, lambda: 0.0)
        if spot:
            s.add(spot[0], "drop", {"at": b, "from": a, "type": mtype, "count": rng.randint(1, 5)})
    if chaos.first_loss_type is not None:
        w = rng.choice([w for w in workload if w["to"] != "all"])
        t = max(0.0, w["start"] - 0.01)
        if busy.free((w["from"], w["to"]), t, t):
            rule = {"at": w["to"], "from": w["from"], "type": chaos.first_loss_type, "count": rng.randint(1, 3)}
            s.add(t, "drop", rule)
    dead: set[str] = set()
    for _ in range(rng.choice([0, 1, 1, 2]) if chaos.restarts else 0):  # restarts, anywhere or after the heals
        node = rng.choice(NODES)
        pairs = [(node, n) for n in NODES if n != node]
        if rng.random() < 0.3:
            # Dead for a while, then back (a kill and a later restart).
            spot = place(pairs, 1.0, duration - 0.5, lambda: rng.uniform(0.5, 3.0), until=duration - 0.2)
            if spot:
                s.add(spot[0], "kill", node)
                s.add(max(spot[0] + 0.1, spot[1]), "restart", node)
        else:
            spot = place(pairs, 1.0, duration - 0.5, lambda: 0.0)
            if spot:
                s.add(spot[0], "restart", node)
    if chaos.restarts and rng.random() < 0.1:
        # A late death: what C sent and was sent is excused, not judged.
        t = duration - rng.uniform(0.2, 1.0)
        if all(busy.free(("C", n), t, duration) for n in ("A", "B")):
            s.add(t, "kill", "C")
            dead.add("C")
    early = [w for w in workload if w["start"] + w["duration"] < last - 1.0]
    if early and rng.random() < 0.5:
        # A cut over the end of a stream: its last messages are lost and nothing follows them, so
        # only the sender's resend of its highest-sent message (the UNICAST3 design) brings them back.
        w = rng.choice(early)
        end = w["start"] + w["duration"]
        t0, t1 = end - rng.uniform(0.1, 0.5), end + rng.uniform(0.3, 1.5)
        to = w["to"] if w["to"] != "all" else rng.choice([n for n in NODES if n != w["from"]])
        if busy.free((w["from"], to), t0, t1):
            s.heal(t1, s.add(t0, "partition", {"from": w["from"], "to": to}))
    syncs = rng.randint(0, 2)
    if admin_sync is None:
        admin_sync = admin_sync_available()
    if admin_sync and chaos.admin_sync_mode is not None and drawn == chaos.admin_sync_mode:
        for _ in range(syncs):
            a, b = rng.sample(NODES, 2)
            s.add(rng.uniform(1.0, duration), "sync", {"at": b, "peer": a})
    s.add(duration, "heal", "all")
    schedule = _valid_lifecycle(s.steps, dead)
    if chaos.lifetime_keys:
        # Fairness: UNICAST3 (like JGroups) reaps a send window that saw no send for
        # conn_expiry_timeout + conn_close_timeout, unacked messages and all. A peer cut off or
        # lossy for about that long is, to the protocol, gone for good (a permanent partition), so
        # the connection lifetime must outlast every disturbance plus a recovery.
        first, *rest = chaos.lifetime_keys
        lifetime = sum(config[key] for key in chaos.lifetime_keys)
        needed = _disturbed_s(schedule) + chaos.lifetime_slack_s
        if lifetime < needed:
            config[first] = float(math.ceil(needed - sum(config[key] for key in rest)))
    return {
        "name": f"chaos-{seed}",
        "protocol": protocol,
        "nodes": list(NODES),
        "config": config,
        "workload": workload,
        "schedule": schedule,
        "duration": duration,
        "settle": SETTLE_S,
        "checks": _all_checks(),
        "seed": seed,
    }


def _lossless(seed: int, protocol: str, config: dict, rng: random.Random, duration: float) -> dict:
    """A lossless seed: concurrent senders (two streams per node) on links with a constant delay and
    no fault, judged by every check and by xmit_traffic at xmit_bound 0 (nothing is ever lost, so
    no retransmission request is needed)."""
    multicast = protocols.get(protocol).multicast
    workload = []
    for src in NODES:
        for dst in ["all"] if multicast else [n for n in NODES if n != src]:
            for _ in range(2):
                workload.append({"from": src, "to": dst, "rate": rng.choice(LOSSLESS_RATES), "duration": duration})
    ms = rng.choice([1, 2, 5])
    return {
        "name": f"chaos-{seed}-lossless",
        "protocol": protocol,
        "nodes": list(NODES),
        "config": config,
        "workload": workload,
        "schedule": [{"at": 0.0, "delay": {"link": "*", "ms": ms}}],
        "duration": duration,
        "settle": SETTLE_S,
        "checks": [*_all_checks(), "xmit_traffic"],
        "xmit_bound": 0,
        "seed": seed,
    }


def _with_membership(
    seed: int, protocol: str, membership: str, config: dict, rng: random.Random, duration: float
) -> dict:
    """A membership seed: every node multicasts from the start to the end while one member is
    killed and restarted (quicker or slower than the failure detector: it rejoins as a new
    incarnation with a join digest), on links with a delay and maybe a loss burst; judged by every
    check and views_agree."""
    from splitbrain.harness.checks import MEMBERSHIP_CHECKS

    fd_timeout = protocols.get(membership).config({}).as_dict().get("fd_timeout", 2.0)
    workload = [
        {"from": node, "to": "all", "rate": rng.choice([20, 40, 60]), "start": 0.0, "duration": duration}
        for node in NODES
    ]
    s = _Schedule()
    ms = rng.choice([1, 5, 20])
    s.add(0.0, "delay", {"link": "*", "ms": ms, "jitter_ms": round(ms * rng.choice([0, 0.5]), 1)})
    # No split and merge, and no restart of the first coordinator (it comes back as a singleton and
    # merges): a merge digest skips what a member's own side sent it and it missed (as in JGroups),
    # which no_loss rightly calls lost. The restarts of the others test the join digest.
    node = rng.choice(NODES[1:])
    t = rng.uniform(2.0, max(2.5, duration - 8.0))
    s.add(t, "kill", node)
    s.add(t + rng.uniform(0.5, 2 * fd_timeout), "restart", node)
    if rng.random() < 0.5:
        link = _link(rng)
        start = rng.uniform(0.5, duration - 2.0)
        i = s.add(start, "loss", {"link": link, "p": rng.choice([0.05, 0.1])})
        s.heal(min(duration - 1.0, start + rng.uniform(0.5, 2.0)), i)
    s.add(duration, "heal", "all")
    return {
        "name": f"chaos-{seed}-{membership}",
        "protocol": protocol,
        "membership": membership,
        "nodes": list(NODES),
        "config": config,
        "workload": workload,
        "schedule": s.steps,
        "duration": duration,
        "settle": SETTLE_S,
        "checks": [*_all_checks(), *MEMBERSHIP_CHECKS],
        "seed": seed,
    }


def _disturbed_s(steps: list[dict]) -> float:
    """Total time (the union of intervals, over all links) during which some partition, loss
    burst or dead node disturbs the cluster; open-ended faults count until the final heal."""
    end = max((st["at"] for st in steps), default=0.0)
    intervals = []
    healed: dict[int, float] = {}
    for st in steps:
        if isinstance(st.get("heal"), int):
            healed[st["heal"]] = st["at"]
    dead_since: dict[str, float] = {}
    for i, st in sorted(enumerate(steps), key=lambda p: p[1]["at"]):
        if "partition" in st or "loss" in st:
            intervals.append((st["at"], healed.get(i, end)))
        elif "kill" in st:
            dead_since[st["kill"]] = st["at"]
        elif "restart" in st and st["restart"] in dead_since:
            intervals.append((dead_since.pop(st["restart"]), st["at"]))
    total, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _valid_lifecycle(steps: list[dict], dead_at_end: set[str]) -> list[dict]:
    """Drop steps that make no sense for a node's state at their time (a view or drop at a dead
    node, a kill of a dead one), fixing `heal: N` indexes; the scenario loader refuses them."""
    order = sorted(range(len(steps)), key=lambda i: steps[i]["at"])
    state = dict.fromkeys(NODES, "running")
    bad: set[int] = set()
    for i in order:
        step = steps[i]
        kind = next(k for k in step if k != "at")
        body = step[kind]
        if kind == "kill":
            if state[body] == "dead":
                bad.add(i)
            state[body] = "dead"
        elif kind == "restart":
            state[body] = "running"
        elif kind in ("view", "drop", "sync") and state[body["at"]] == "dead":
            bad.add(i)
    return remove_steps(steps, bad)


def remove_steps(steps: list[dict], remove: Iterable[int]) -> list[dict]:
    """The schedule without the steps at file indexes `remove` (and the heals of those), with
    every `heal: N` renumbered."""
    remove = set(remove)
    while True:
        more = {i for i, st in enumerate(steps) if isinstance(st.get("heal"), int) and st["heal"] in remove}
        if more <= remove:
            break
        remove |= more
    new_index: dict[int, int] = {}
    kept: list[dict[str, Any]] = []
    for i, st in enumerate(steps):
        if i not in remove:
            new_index[i] = len(kept)
            kept.append(st)
    out = []
    for st in kept:
        if isinstance(st.get("heal"), int):
            st = {**st, "heal": new_index[st["heal"]]}
        out.append(copy.deepcopy(st))
    return out


def _all_checks() -> list[str]:
    from splitbrain.harness.checks import GENERAL_CHECKS

    return list(GENERAL_CHECKS)
