"""The views_agree checker (harness.checks) on hand-built event logs.

Each test builds a membership story with node.events.make_event: nodes start, install views (the
`view` events GMS logs), maybe die or restart, and the harness heals a partition; the check must
pass only when every live node ends with one view that lists exactly the live nodes.
"""

from __future__ import annotations

from splitbrain.harness.checks import CHECKS, GENERAL_CHECKS, MEMBERSHIP_CHECKS, CheckResult, run_checks
from splitbrain.harness.scenario import default_checks, parse_scenario
from splitbrain.node.events import make_event, validate_event


def start(t: float, node: str, incarnation: int = 0) -> dict:
    return make_event(t, node, "node", "node_start", incarnation=incarnation)


def stop(t: float, node: str, reason: str = "kill") -> dict:
    return make_event(t, node, "node", "node_stop", reason=reason)


def view(t: float, node: str, view_id: int, members: str, coord: str | None = None, reason: str = "join") -> dict:
    return make_event(
        t, node, "gms", "view", view_id=view_id, members=list(members), coord=coord or members[0], reason=reason
    )


def heal(t: float) -> dict:
    return make_event(t, "harness", "harness", "fault_off", fault="partition", detail="A->B", links=["A->B"])


def judge(events: list[dict]) -> CheckResult:
    for ev in events:
        validate_event(ev)
    (res,) = run_checks(sorted(events, key=lambda ev: ev["t"]), ["views_agree"])
    return res


def formed(nodes: str = "ABC", t: float = 1.0, view_id: int = 3) -> list[dict]:
    """Every node started at 0 and installed the same view at t."""
    return [start(0.0, n) for n in nodes] + [view(t, n, view_id, nodes) for n in nodes]


def test_one_view_listing_every_live_node_passes():
    """A, B and C all end with view 3 [A, B, C] coordinated by A: pass, 3 nodes judged."""
    res = judge(formed())
    assert res.passed and not res.vacuous and res.judged == 3
    assert res.explanation == "3 live node(s) hold view 3 coord A [A, B, C]"


def test_disagreeing_views_fail_naming_each_node_and_its_view():
    """After a one-way partition B and C dropped A, which still lists everyone: fail, naming both views."""
    events = formed() + [view(4.0, "B", 4, "BC"), view(4.0, "C", 4, "BC")]
    res = judge(events)
    assert not res.passed and not res.vacuous
    assert res.explanation == (
        "live nodes disagree on the view: B, C: view 4 coord B [B, C] (t=4.000); A: view 3 coord A [A, B, C] (t=1.000)"
    )
    assert res.details["views"]["A"]["members"] == ["A", "B", "C"]


def test_same_members_other_coordinator_or_id_disagree():
    """Two sides that merged into the same members but with other coordinators or view ids disagree."""
    res = judge(formed("AB") + [view(5.0, "A", 7, "AB", coord="A"), view(5.0, "B", 7, "AB", coord="B")])
    assert not res.passed and "coord A" in res.explanation and "coord B" in res.explanation
    res = judge(formed("AB") + [view(5.0, "A", 7, "AB"), view(5.0, "B", 8, "AB")])
    assert not res.passed and "view 7" in res.explanation and "view 8" in res.explanation


def test_live_node_missing_from_the_view_fails():
    """A and B agree on [A, B] but C is alive (it never joined): fail, C has no view and is missing."""
    events = [start(0.0, n) for n in "ABC"] + [view(1.0, n, 2, "AB") for n in "AB"] + [view(1.0, "C", 1, "C")]
    res = judge(events)
    assert not res.passed
    assert "C: view 1 coord C [C]" in res.explanation
    # Every node holding the same view that leaves out a live one.
    events = [start(0.0, n) for n in "ABC"] + [view(1.0, n, 2, "AB") for n in "AB"]
    res = judge(events + [make_event(2.0, "C", "unicast3", "send", peer="A", seqno=1, conn_id=1, app="C:0:0")])
    assert not res.passed
    assert "C: no view installed since its last start" in res.explanation


def test_agreed_view_without_a_live_member_fails():
    """Every live node holds [A, B] while C is alive too (and holds nothing): fail naming C."""
    events = formed("AB") + [start(0.0, "C"), view(1.0, "C", 3, "AB")]
    res = judge(events)
    assert not res.passed
    assert (
        res.explanation
        == "A, B, C hold view 3 coord A [A, B] (t=1.000): live node(s) C missing from the view they hold"
    )


def test_dead_node_still_listed_fails():
    """C was killed and never excluded: A and B still list it, fail (C dead at the end)."""
    res = judge(formed() + [stop(2.0, "C")])
    assert not res.passed
    assert res.explanation == "A, B hold view 3 coord A [A, B, C] (t=1.000): the view lists C (dead at the end)"
    assert res.judged == 2 and res.details["dead"] == ["C"]


def test_dead_node_excluded_passes_and_restart_must_rejoin():
    """C killed then excluded: pass; C restarted (new incarnation) must install the new view itself."""
    excluded = formed() + [stop(2.0, "C"), view(5.0, "A", 4, "AB", reason="suspect"), view(5.0, "B", 4, "AB")]
    assert judge(excluded).passed
    # C restarted: its view from before the restart does not count.
    restarted = excluded + [start(6.0, "C", incarnation=1)]
    res = judge(restarted)
    assert not res.passed and "C: no view installed since its last start" in res.explanation
    rejoined = restarted + [view(7.0, n, 5, "ABC") for n in "ABC"]
    assert judge(rejoined).passed


def test_teardown_leaves_do_not_count():
    """A live run ends with graceful stops; the views nodes install on the others' LEAVE after the
    first of them belong to the teardown and are not judged."""
    events = formed() + [heal(2.0)]
    events += [stop(10.0, "A", reason="stop"), view(10.1, "B", 4, "BC", reason="leave"), view(10.1, "C", 4, "BC")]
    events += [stop(10.2, "B", reason="stop"), stop(10.3, "C", reason="stop")]
    res = judge(events)
    assert res.passed, res.explanation
    assert res.details["heal_to_agreement_s"] == 0.0


def test_heal_to_agreement_is_measured():
    """A partition heals at 4 s and the merged view is everywhere at 5.5 s: 1.5 s after the heal."""
    events = formed() + [view(3.0, "B", 4, "BC"), view(3.0, "C", 4, "BC"), view(3.0, "A", 4, "A")]
    events += [heal(4.0)] + [view(5.0 + i * 0.25, n, 5, "ABC", reason="merge") for i, n in enumerate("ABC")]
    res = judge(events)
    assert res.passed
    assert res.details["agreed_t"] == 5.5 and res.details["heal_to_agreement_s"] == 1.5
    assert res.explanation.endswith("agreed 1.500s after the last heal")


def test_no_view_event_is_vacuous():
    """A log with nodes but no view event judged nothing: not a pass."""
    res = judge([start(0.0, "A"), start(0.0, "B")])
    assert res.vacuous and not res.passed and res.judged == 0
    assert res.explanation == "judged nothing: no view event from any node"
    everyone_dead = judge(formed("AB") + [stop(2.0, "A"), stop(2.0, "B")])
    assert everyone_dead.vacuous and not everyone_dead.passed


def test_coord_defaults_to_the_first_member():
    """A view event without coord (an injected view logged by a reliable layer) is coordinated by its first member."""
    events = [start(0.0, n) for n in "AB"]
    events += [make_event(1.0, n, "unicast3", "view", view_id=2, members=["A", "B"]) for n in "AB"]
    res = judge(events)
    assert res.passed and res.details["views"]["A"]["coord"] == "A"


def test_membership_check_is_a_default_only_with_gms():
    """views_agree is registered, but judges only runs that name it: a gms scenario's defaults."""
    assert "views_agree" in CHECKS and MEMBERSHIP_CHECKS == ("views_agree",)
    assert "views_agree" not in GENERAL_CHECKS
    assert [r.name for r in run_checks([])] == list(GENERAL_CHECKS)
    assert "views_agree" not in default_checks("unicast3")
    assert default_checks("unicast3", "gms")[-2:] == ("views_agree", "no_errors")
    listed = parse_scenario(
        {
            "name": "x",
            "protocol": "unicast3",
            "nodes": 2,
            "duration": 1,
            "workload": [],
            "checks": ["fifo", "views_agree"],
        }
    )
    assert listed.checks == ("fifo", "views_agree", "no_errors")


def test_live_settle_waits_for_one_view_of_the_running_nodes():
    """harness.live.view_problems (the live runner's settle test with gms): no view yet, differing
    views, and a view that is not the running nodes keep a run from settling."""
    from splitbrain.harness.live import view_problems

    def m(view_id, members, coord=None):
        return {"view_id": view_id, "coord": coord or members[0], "members": list(members), "suspects": []}

    assert view_problems({"A": m(3, "AB"), "B": m(3, "AB")}) == []
    assert view_problems({"A": m(3, "AB"), "B": None}) == ["B: no view yet"]
    assert view_problems({"A": m(3, "AB"), "B": m(4, "B")}) == [
        "views differ: A: view 3 coord A [A, B]; B: view 4 coord B [B]"
    ]
    assert view_problems({"A": m(3, "ABC"), "B": m(3, "ABC")}) == [
        "view 3 coord A [A, B, C] is not the running nodes [A, B]"
    ]
