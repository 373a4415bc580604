"""Live "eventually" checks: poll running nodes until they have settled, or say why not.

After the last heal and the end of the workload, a run is settled when, on the nodes that run:

- every stream is done at its sender (GET /streams);
- no protocol layer is busy (GET /state: `busy` is empty: no resync in progress, no answer awaited);
- every send window is fully acked (HA == HS) and the receiver's window for it has the same
  conn_id and has delivered up to HS (GET /state `windows`, both ends; node.views.pair_problem);
- every stream's last message has reached its receiver (GET /delivered), when neither end
  restarted (a restarted node's counters start again, so the windows speak for it);
- with a membership protocol (`membership: gms`), every running node holds one and the same view
  (GET /state `membership`: view_id, coordinator, members) listing exactly the running nodes, as
  views_agree will judge; without it the run would end between a heal and the merge.

This is what the event-log checks (harness.checks) will judge once the nodes are stopped, seen
from outside while it happens; its only job is to end the run as soon as there is nothing left
to wait for, and to say clearly what was still missing when `settle` ran out. A run that does not
settle is still judged by the checks (a scenario that reproduces a bug never settles).
"""

from __future__ import annotations

import time
from collections.abc import Set
from dataclasses import dataclass, field

from splitbrain.harness.backends.admin import AdminError
from splitbrain.harness.backends.base import NodeState
from splitbrain.harness.poll import EventuallyTimeout, eventually
from splitbrain.harness.scenario import Scenario
from splitbrain.node.views import pair_problem

EXPECTED = (
    "every stream done at its sender, no protocol layer busy, every send window fully acked "
    "and matched by its receiver's window (same conn_id, delivered == HS), every stream's "
    "last message delivered (with a membership protocol: one view of exactly the running nodes on each)"
)
PROBLEMS_SHOWN = 6


@dataclass
class Observation:
    """One poll of the cluster: settled or not, and what is still missing."""

    ok: bool
    problems: list[str] = field(default_factory=list)
    t: float = 0.0  # run clock when it was taken


@dataclass
class SettleResult:
    ok: bool
    bound_s: float
    elapsed_s: float
    polls: int
    message: str
    last: Observation | None = None

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "bound_s": self.bound_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "polls": self.polls,
            "message": self.message,
            "last_seen": [] if self.last is None else self.last.problems[:PROBLEMS_SHOWN],
        }


def observe(cluster, scenario: Scenario, restarted: Set[str] = frozenset()) -> Observation:
    """Poll every running node once and list what keeps the cluster from being settled."""
    problems: list[str] = []
    running = [n for n, h in cluster.nodes.items() if h.state is NodeState.RUNNING]
    states: dict[str, dict] = {}
    streams: dict[str, dict[int, dict]] = {}
    delivered: dict[str, dict] = {}
    for name in running:
        admin = cluster.admin(name)
        try:
            states[name] = admin.state()
            streams[name] = {int(s["stream"]): s for s in admin.streams() if "stream" in s}
            delivered[name] = admin.delivered().get("delivered", {})
        except AdminError as exc:
            problems.append(str(exc))
    if problems:
        return Observation(ok=False, problems=problems, t=cluster.now())

    for name in running:
        for s in streams[name].values():
            if not s.get("done"):
                problems.append(
                    f"{name} stream {s['stream']} to {s.get('to')}: sent {s.get('sent')} "
                    f"of {s.get('planned')}, not done"
                )
        problems.extend(f"{name} {b['proto']}: {b['reason']}" for b in states[name].get("busy", []))

    recv_windows = {
        (name, w["peer"], w["proto"]): w
        for name in running
        for w in states[name].get("windows", [])
        if w["side"] == "recv"
    }
    for sender in running:
        for send in states[sender].get("windows", []):
            receiver = send["peer"]
            if send["side"] != "send" or receiver not in states:
                continue  # a dead or paused receiver: nothing to wait for
            recv = recv_windows.get((receiver, sender, send["proto"]))
            problem = pair_problem(sender, receiver, send, recv)
            if problem:
                problems.append(f"{sender}->{receiver}: {problem}")

    for stream in scenario.streams:
        src, dest = stream.src, stream.dest
        if src not in streams or dest not in delivered or src in restarted or dest in restarted:
            continue
        info = streams[src].get(stream.index)
        if info is None:
            continue
        got = delivered[dest].get(src) or {}
        got = got.get(str(stream.index), got.get(stream.index)) or {}
        sent = int(info.get("sent", 0))
        last = int(got.get("last") or 0)
        if last < sent:
            problems.append(f"stream {stream.index} {src}->{dest}: {dest} delivered up to {last} of {sent} sent")
    if getattr(scenario, "membership", "static") != "static":
        problems.extend(view_problems({name: states[name].get("membership") for name in running}))
    return Observation(ok=not problems, problems=problems, t=cluster.now())


def view_problems(memberships: dict[str, dict | None]) -> list[str]:
    """Why the running nodes (the keys) do not all hold one view listing exactly them, from each
    one's GET /state `membership` (None: no membership layer or no view yet)."""
    problems = [f"{name}: no view yet" for name, m in memberships.items() if m is None]
    held = {name: m for name, m in memberships.items() if m is not None}
    views: dict[tuple, list[str]] = {}
    for name, m in held.items():
        views.setdefault((m.get("view_id"), m.get("coord"), tuple(m.get("members") or ())), []).append(name)
    if len(views) > 1:
        problems.append(
            "views differ: "
            + "; ".join(
                f"{', '.join(names)}: view {k[0]} coord {k[1]} [{', '.join(k[2])}]" for k, names in views.items()
            )
        )
    elif views and not problems:
        (view_id, coord, members), _names = next(iter(views.items()))
        if sorted(members) != sorted(memberships):
            problems.append(
                f"view {view_id} coord {coord} [{', '.join(members)}] is not the running nodes "
                f"[{', '.join(sorted(memberships))}]"
            )
    return problems


def wait_settled(
    cluster,
    scenario: Scenario,
    *,
    bound_s: float,
    poll_s: float = 0.1,
    restarted: Set[str] = frozenset(),
    on_poll=None,
    sleep=time.sleep,
) -> SettleResult:
    """Poll (harness.poll.eventually) until `observe` finds nothing missing or `bound_s` has passed.

    The bound is measured on the cluster's clock, so a test with a fake clock stays exact."""
    start = cluster.now()
    seen: list[Observation] = []

    def poll() -> Observation:
        cluster.check_alive()
        if on_poll is not None:
            on_poll()
        obs = observe(cluster, scenario, restarted)
        seen.append(obs)
        return obs

    obs: Observation | None
    try:
        obs = eventually(
            lambda: (o := poll()).ok and o, timeout=bound_s, interval=poll_s, clock=cluster.now, sleep=sleep
        )
    except EventuallyTimeout:
        obs = seen[-1] if seen else None
    elapsed = cluster.now() - start
    if obs is not None and obs.ok:
        return SettleResult(
            ok=True,
            bound_s=bound_s,
            elapsed_s=elapsed,
            polls=len(seen),
            message=f"settled {elapsed:.2f}s after the workload ended ({len(seen)} polls)",
            last=obs,
        )
    last = "nothing (no poll finished)" if obs is None else "; ".join(obs.problems[:PROBLEMS_SHOWN])
    hidden = 0 if obs is None else len(obs.problems) - PROBLEMS_SHOWN
    more = f" (+{hidden} more)" if hidden > 0 else ""
    message = (
        f"not settled within settle={bound_s:g}s after the workload ended: expected {EXPECTED}; last seen: {last}{more}"
    )
    return SettleResult(ok=False, bound_s=bound_s, elapsed_s=elapsed, polls=len(seen), message=message, last=obs)
