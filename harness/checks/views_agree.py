"""views_agree (membership): at the end of the run (its first graceful stop, or the end of the
log), every live node has installed the same view since its last start (members, view_id and
coordinator of its last `view` event; members and coordinator only under static membership,
where no view names a reason and view ids are each node's own count) and that view lists
exactly the live nodes. A node paused at the end is judged like a cut: it need not agree, and
the view may list it or not. A node is live
when its last lifecycle event is not a kill (a graceful stop ends a live run). The run's end is
the settle time after the last heal, so this is "after the last heal and `settle`".
"""

from __future__ import annotations

from collections import defaultdict

from .checker import Check, CheckContext
from .events import is_harness, ordered
from .results import CheckResult, vacuous_result
from .timeline import LIFECYCLE, Lives, Pauses, is_heal, run_end


class ViewsAgree(Check):
    """At the end of the run every live node holds one and the same view, listing exactly them
    (a node paused at the end is judged like a cut one: not required to agree, nor to be listed)."""

    name = "views_agree"
    unit = " nodes"
    membership = True

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        # The few events the verdict reads (the harness's, lifecycles, views), in log order, and
        # every node with an event: what a send or a delivery tells is only that its node exists.
        self.kept: list[dict] = []
        self.seen: set[str] = set()

    def see_send(self, ev: dict) -> None:
        if not is_harness(ev):
            self.seen.add(ev["node"])

    see_deliver = see_send_run = see_deliver_run = see_send

    def see_other(self, ev: dict) -> None:
        if is_harness(ev):
            self.kept.append(ev)
            return
        self.seen.add(ev["node"])
        if ev["kind"] in LIFECYCLE or ev["kind"] == "view":
            self.kept.append(ev)

    def result(self) -> CheckResult:
        return _judge(self.kept, self.seen)


def check_views_agree(events: list[dict]) -> CheckResult:
    """views_agree over a log given in time order (or any subset holding the harness's events,
    the lifecycles, the views and one event of every node)."""
    events = ordered(events)
    seen = {ev["node"] for ev in events if not is_harness(ev)}
    return _judge(events, seen)


def _judge(events: list[dict], seen: set[str]) -> CheckResult:
    """The verdict from the harness's events, lifecycles and views in time order (others are
    skipped) and the nodes seen."""
    end = run_end(events)
    lives = Lives()
    pauses = Pauses()
    views: dict[str, dict | None] = {}  # node -> its last view since its last start
    any_view = 0
    membership = False  # a view installed by a membership protocol (it names a reason)
    last_heal: float | None = None
    for ev in events:
        node, kind = ev["node"], ev["kind"]
        in_run = end is None or ev["t"] <= end
        if is_harness(ev):
            if in_run:
                pauses.observe(ev)
                if is_heal(ev):
                    last_heal = ev["t"]
            continue
        if kind in LIFECYCLE:
            lives.observe(ev)
            if in_run:
                pauses.observe(ev)
            if kind == "node_start":
                views[node] = None
        elif kind == "view" and in_run:
            any_view += 1
            membership = membership or ev.get("reason") is not None
            views[node] = _view_of(ev)
    paused = sorted(n for n in pauses.paused if n in seen and not lives.dead(n))
    return views_agree_result(
        {n: views.get(n) for n in sorted(seen) if not lives.dead(n) and n not in pauses.paused},
        sorted(n for n in seen if lives.dead(n)),
        any_view,
        last_heal,
        paused=paused,
        static=not membership,
    )


def _view_of(ev: dict) -> dict:
    """The view a `view` event installs; coord "" or absent means the first member (the contract
    of node.layer.ViewChange)."""
    members = list(ev.get("members") or ())
    return {
        "view_id": ev.get("view_id"),
        "coord": ev.get("coord") or (members[0] if members else ""),
        "members": members,
        "t": ev["t"],
        "reason": ev.get("reason"),
    }


def _view_key(view: dict, static: bool = False) -> tuple:
    """What two nodes' views must share to agree. Under static membership (no view of the run came
    from a membership protocol) view ids are each node's own count of the views it was given, so
    only members and coordinator are compared."""
    if static:
        return (view["coord"], tuple(view["members"]))
    return (view["view_id"], view["coord"], tuple(view["members"]))


def _describe_view(view: dict | None) -> str:
    if view is None:
        return "no view installed since its last start"
    return f"view {view['view_id']} coord {view['coord']} [{', '.join(view['members'])}] (t={view['t']:.3f})"


def views_agree_result(
    final: dict[str, dict | None],
    dead: list[str],
    installed: int,
    last_heal: float | None,
    paused: list[str] | None = None,
    static: bool = False,
) -> CheckResult:
    """views_agree's verdict: `final` maps each live node to its last view (None: none since its
    last start), `dead` lists the nodes dead at the end, `installed` counts view events, `paused`
    the nodes paused at the end (neither judged nor required in the view), `static` says that no
    membership protocol installed a view (view ids are then not compared)."""
    paused = list(paused or ())
    live = list(final)
    details: dict = {
        "views": final,
        "live": live,
        "dead": dead,
        "views_installed": installed,
        "last_heal_t": last_heal,
        "agreed_t": None,
        "heal_to_agreement_s": None,
    }
    if paused:
        details["paused"] = paused
    if static:
        details["compared"] = "members and coordinator (static membership: view ids are per node)"
    if not installed:
        return vacuous_result("views_agree", "no view event from any node", details)
    if not live:
        nothing = f"no node alive at the end ({installed} view event(s))"
        if paused:
            nothing += f"; paused at the end: {', '.join(paused)}"
        return vacuous_result("views_agree", nothing, details)
    groups: dict[tuple, list[str]] = defaultdict(list)
    for node, view in final.items():
        groups[_view_key(view, static) if view is not None else ()].append(node)
    problems = []
    if len(groups) > 1:
        # Name each node and its view, largest group first, so the odd ones out read last.
        ordered = sorted(groups.values(), key=lambda nodes: (-len(nodes), nodes))
        parts = [f"{', '.join(nodes)}: {_describe_view(final[nodes[0]])}" for nodes in ordered]
        problems.append("live nodes disagree on the view: " + "; ".join(parts))
    else:
        view = final[live[0]]
        if view is None:
            problems.append(f"{', '.join(live)}: {_describe_view(None)}")
        else:
            missing = [n for n in live if n not in view["members"]]
            extra = [m for m in view["members"] if m not in final and m not in paused]
            if missing:
                problems.append(f"live node(s) {', '.join(missing)} missing from the view they hold")
            if extra:
                why = "dead at the end" if all(m in dead for m in extra) else "not live at the end"
                problems.append(f"the view lists {', '.join(extra)} ({why})")
            if problems:
                problems[0] = f"{', '.join(live)} hold {_describe_view(view)}: " + problems[0]
            else:
                agreed = max(v["t"] for v in final.values() if v is not None)
                details["agreed_t"] = agreed
                if last_heal is not None:
                    details["heal_to_agreement_s"] = max(0.0, agreed - last_heal)
    if problems:
        return CheckResult("views_agree", False, "; ".join(problems), details, judged=len(live))
    view = final[live[0]]
    assert view is not None
    shown = f"coord {view['coord']} [{', '.join(view['members'])}]"
    explanation = (
        f"{len(live)} live node(s) hold members and coordinator {shown} (static membership: view ids not compared)"
        if static
        else f"{len(live)} live node(s) hold view {view['view_id']} {shown}"
    )
    if details["heal_to_agreement_s"] is not None:
        explanation += f", agreed {details['heal_to_agreement_s']:.3f}s after the last heal"
    if paused:
        explanation += f"; {', '.join(paused)} paused at the end (judged like a cut: not required to agree)"
    return CheckResult("views_agree", True, explanation, details, judged=len(live))
