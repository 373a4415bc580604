"""harness.nemesis: a schedule step plus the cluster's state becomes primitive operations.

Pure tests: no simulator, no cluster. Steps come from parse_scenario, states are written out.
"""

from __future__ import annotations

import pytest

from splitbrain.harness import nemesis
from splitbrain.harness.nemesis import (
    AdminSync,
    ClusterState,
    Lifecycle,
    LinkFault,
    RuleAdd,
    RuleRemove,
    Timeline,
    View,
    step_ops,
)
from splitbrain.harness.scenario import parse_scenario
from splitbrain.node.faultlayer import FaultRule

NODES = ("A", "B", "C")


def _steps(*schedule):
    data = {
        "name": "t",
        "protocol": "unicast3",
        "nodes": list(NODES),
        "duration": 10,
        "workload": [{"from": "A", "to": "B", "rate": 10, "count": 5}],
        "schedule": list(schedule),
    }
    return parse_scenario(data).schedule


def _state(steps, active=(), **states):
    return ClusterState(
        nodes=NODES, states={n: states.get(n, nemesis.RUNNING) for n in NODES}, active=tuple(active), steps=steps
    )


def _timeline(ops):
    return [(op.kind, op.fault, op.detail, op.links) for op in ops if isinstance(op, Timeline)]


# ---- steps that put something in force ---------------------------------------------------------


def test_network_step_is_a_link_fault_then_fault_on_with_the_cut_links():
    """partition A -> B: one LinkFault on, then fault_on naming the link it cuts."""
    steps = _steps({"at": 1, "partition": {"from": "A", "to": "B"}})
    ops = step_ops(steps[0], _state(steps))
    assert ops == [
        LinkFault(step=steps[0], on=True),
        Timeline(kind="fault_on", fault="partition", detail="#0 partition A -> B (one-way)", links=("A->B",)),
    ]


def test_lossy_link_cuts_nothing():
    """loss below 1 is a link fault whose timeline entry names no cut link."""
    steps = _steps({"at": 1, "loss": {"link": "A<->B", "p": 0.2}})
    assert _timeline(step_ops(steps[0], _state(steps))) == [("fault_on", "loss", "#0 loss A<->B p=0.2", ())]


def test_drop_step_is_the_fault_rule_as_written_even_at_a_paused_node():
    """drop at a paused node is still installed (the executor decides how to reach it)."""
    steps = _steps({"at": 1, "drop": {"at": "B", "from": "A", "type": ["ACK", "DATA"], "count": 2, "until": 4}})
    ops = step_ops(steps[0], _state(steps, B=nemesis.PAUSED))
    rule = FaultRule(direction="up", peer="A", types=frozenset({"ACK", "DATA"}), count=2, until=4.0)
    assert ops[0] == RuleAdd(step=steps[0], node="B", rule=rule)
    assert [type(op) for op in ops] == [RuleAdd, Timeline]


def test_view_and_sync_become_their_operations():
    """view and sync at a live node: View(members) and AdminSync(peer), then fault_on."""
    steps = _steps({"at": 1, "view": {"at": "B", "members": ["B", "C"]}}, {"at": 2, "sync": {"at": "C", "peer": "A"}})
    view, sync = (step_ops(step, _state(steps)) for step in steps)
    assert view[0] == View(node="B", members=("B", "C")) and sync[0] == AdminSync(node="C", peer="A")
    assert _timeline(sync) == [("fault_on", "sync", "#1 sync at C with A", ())]


@pytest.mark.parametrize(
    "step",
    [{"drop": {"at": "B", "type": "ACK"}}, {"view": {"at": "B", "members": ["B"]}}, {"sync": {"at": "B", "peer": "A"}}],
    ids=["drop", "view", "sync"],
)
def test_a_step_aimed_at_a_dead_node_is_skipped(step):
    """drop, view and sync at a dead node: nothing but a fault_on that says it was skipped."""
    steps = _steps({"at": 1, **step})
    ops = step_ops(steps[0], _state(steps, B=nemesis.DEAD))
    kind = next(iter(step))
    assert ops == [Timeline(kind="fault_on", fault=kind, detail=f"{steps[0].describe()} (skipped: B is dead)")]


# ---- lifecycle ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, state, acts",
    [
        ("kill", nemesis.RUNNING, True),
        ("kill", nemesis.PAUSED, True),
        ("kill", nemesis.DEAD, False),
        ("pause", nemesis.RUNNING, True),
        ("pause", nemesis.PAUSED, False),
        ("pause", nemesis.DEAD, False),
        ("resume", nemesis.PAUSED, True),
        ("resume", nemesis.RUNNING, False),
        ("restart", nemesis.DEAD, True),
        ("restart", nemesis.RUNNING, True),
    ],
)
def test_lifecycle_acts_only_where_the_node_state_allows(kind, state, acts):
    """kill a live node, pause a running one, resume a paused one, restart always; logged either way."""
    # The loader wants a pause before a resume; only the last step is interpreted here.
    steps = _steps(*([{"at": 0.5, "pause": "B"}] if kind == "resume" else []), {"at": 1, kind: "B"})
    ops = step_ops(steps[-1], _state(steps, B=state))
    assert ([op for op in ops if isinstance(op, Lifecycle)] == [Lifecycle(action=kind, node="B")]) is acts
    assert isinstance(ops[-1], Timeline) and len(ops) == 1 + acts


def test_pause_and_resume_name_the_nodes_links_and_resume_ends_the_pause():
    """pause is fault_on of pause; resume is fault_off of pause; both name B's links both ways."""
    steps = _steps({"at": 1, "pause": "B"}, {"at": 2, "resume": "B"})
    pause = step_ops(steps[0], _state(steps))
    resume = step_ops(steps[1], _state(steps, B=nemesis.PAUSED))
    links = ("B->A", "A->B", "B->C", "C->B")
    assert _timeline(pause) == [("fault_on", "pause", "#0 pause B", links)]
    assert _timeline(resume) == [("fault_off", "pause", "#1 resume B", links)]


# ---- heals -------------------------------------------------------------------------------------


def test_heal_all_undoes_every_active_step_in_order_then_logs_each():
    """heal all: the undo of each step in force in step order (rule or link), then one fault_off each."""
    steps = _steps(
        {"at": 1, "partition": [["A"], ["B", "C"]]},
        {"at": 2, "delay": {"link": "A->B", "ms": 5}},
        {"at": 3, "drop": {"at": "C", "type": "DATA"}},
        {"at": 4, "heal": "all"},
    )
    ops = step_ops(steps[3], _state(steps, active=(2, 0)))
    assert ops[:2] == [LinkFault(step=steps[0], on=False), RuleRemove(step=steps[2])]
    assert [(kind, fault, detail) for kind, fault, detail, _links in _timeline(ops)] == [
        ("fault_off", "partition", "#0 partition A | B,C (by #3 heal all)"),
        ("fault_off", "drop", "#2 drop at C up *->C type=DATA (by #3 heal all)"),
    ]
    assert sorted(_timeline(ops)[0][3]) == ["A->B", "A->C", "B->A", "C->A"]


def test_heal_all_with_nothing_in_force_says_so():
    """heal all with no active step: one fault_off of the heal itself."""
    steps = _steps({"at": 1, "heal": "all"})
    assert step_ops(steps[0], _state(steps)) == [
        Timeline(kind="fault_off", fault="heal", detail="#0 heal all: nothing to heal")
    ]


def test_heal_of_one_step_undoes_it_or_says_it_was_not_active():
    """heal 0 of an active partition removes it (links named); of an inactive one, only says so."""
    steps = _steps({"at": 1, "partition": {"from": "A", "to": "B"}}, {"at": 2, "heal": 0})
    ops = step_ops(steps[1], _state(steps, active=(0,)))
    assert ops == [
        LinkFault(step=steps[0], on=False),
        Timeline(
            kind="fault_off", fault="partition", detail="#0 partition A -> B (one-way) (by #1 heal #0)", links=("A->B",)
        ),
    ]
    assert step_ops(steps[1], _state(steps)) == [
        Timeline(
            kind="fault_off", fault="partition", detail="#0 partition A -> B (one-way) (by #1 heal #0, was not active)"
        )
    ]


# ---- the vocabulary's translations -------------------------------------------------------------


def test_link_changes_are_the_simulators_link_model_fields():
    """Each network kind as LinkModel changes, in seconds."""
    steps = _steps(
        {"at": 1, "partition": {"from": "A", "to": "B"}},
        {"at": 1, "loss": {"link": "A->B", "p": 0.5}},
        {"at": 1, "delay": {"link": "A->B", "ms": 30, "jitter_ms": 10}},
        {"at": 1, "duplicate": {"link": "A->B", "p": 0.1}},
        {"at": 1, "reorder": {"link": "A->B", "p": 0.2}},
    )
    assert [nemesis.link_changes(s) for s in steps] == [
        {"blocked": True},
        {"loss_p": 0.5},
        {"delay_s": 0.03, "jitter_s": 0.01},
        {"dup_p": 0.1},
        {"reorder_p": 0.2, "reorder_s": 0.01},
    ]


def test_receiver_rules_and_their_admin_bodies():
    """A delay A<->B is a holding rule at each receiver; its body carries delay_s and jitter_s."""
    steps = _steps(
        {"at": 1, "delay": {"link": "A<->B", "ms": 30, "jitter_ms": 10}}, {"at": 1, "delay": {"link": "A->B", "ms": 0}}
    )
    rules = nemesis.receiver_rules(steps[0])
    assert sorted((r.node, r.rule.peer, r.holds) for r in rules) == [("A", "B", True), ("B", "A", True)]
    assert nemesis.rule_body(rules[0].rule) == {
        "direction": "up",
        "action": "delay",
        "peer": rules[0].rule.peer,
        "delay_s": 0.02,
        "jitter_s": 0.02,
    }
    assert nemesis.receiver_rules(steps[1]) == [], "a zero delay is no fault at all"
    rule = FaultRule(direction="down", peer="C", types=frozenset({"SYNC", "ACK"}), seqnos=(1, 3))
    assert nemesis.rule_body(rule) == {
        "direction": "down",
        "action": "drop",
        "peer": "C",
        "types": ["ACK", "SYNC"],
        "seqnos": [1, 3],
    }
