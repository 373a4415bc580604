"""The checkers on multicast logs (NAKACK2's send/deliver events): a clean run of three members,
then one planted defect per test, each of which the right check must catch.

A multicast is owed to each member of the sender's view when it was sent (the sender included)
that stayed in that view, up and reachable, for the recovery bound (harness.checks, no_loss).
"""

from __future__ import annotations

from harness.checks import run_checks
from node.events import make_event, validate_event

MEMBERS = ["A", "B", "C"]
BOUND = 2.0


def msend(t: float, x: str, n: int, members=MEMBERS) -> dict:
    return make_event(t, x, "nakack2", "send", members=list(members), seqno=n, bytes=20, app=f"{x}:0:{n}")


def mdeliver(t: float, y: str, x: str, n: int) -> dict:
    return make_event(t, y, "nakack2", "deliver", peer=x, seqno=n, bytes=20, app=f"{x}:0:{n}")


def view(t: float, node: str, members) -> dict:
    return make_event(t, node, "nakack2", "view", members=list(members), view_id=int(t * 10) + 1)


def clean(count: int = 5) -> list[dict]:
    """A multicasts 1..count at t=1, 1.1, ...; every member (A by loopback) delivers each at once."""
    events = [view(0.0, m, MEMBERS) for m in MEMBERS]
    for n in range(1, count + 1):
        t = 1.0 + n / 10
        events.append(msend(t, "A", n))
        events.extend(mdeliver(t + 0.001, m, "A", n) for m in MEMBERS)
    return events


def verdict(events: list[dict]) -> dict:
    for ev in events:
        validate_event(ev)
    return {r.name: r for r in run_checks(events, ["fifo", "no_duplicates", "no_loss"], recovery_bound_s=BOUND)}


def test_clean_multicast_run_passes_and_counts_each_member():
    """5 multicasts to 3 members: 15 owed (the sender's own loopback deliveries included), all delivered."""
    v = verdict(clean())
    assert all(r.passed for r in v.values()), v
    assert v["no_loss"].judged == 15 and v["fifo"].judged == 15


def test_a_multicast_missing_at_one_member_fails_no_loss():
    """C never delivers A's multicast 3: no_loss names A->C and the app id."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "C" and e["seqno"] == 3)]
    v = verdict(events)
    assert not v["no_loss"].passed
    assert v["no_loss"].details["lost"] == {"A->C": {"count": 1, "first": ["A:0:3"], "last_deliver_t": 1.501}}
    assert v["fifo"].passed and v["no_duplicates"].passed


def test_the_senders_own_delivery_is_owed_too():
    """A does not deliver its own multicast 2 (no loopback): no_loss names A->A."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "A" and e["seqno"] == 2)]
    assert list(verdict(events)["no_loss"].details["lost"]) == ["A->A"]


def test_out_of_order_multicast_delivery_fails_fifo():
    """B delivers A's 4 before 3: fifo fails at B."""
    events = clean()
    i3 = next(i for i, e in enumerate(events) if e["kind"] == "deliver" and e["node"] == "B" and e["seqno"] == 3)
    i4 = next(i for i, e in enumerate(events) if e["kind"] == "deliver" and e["node"] == "B" and e["seqno"] == 4)
    events[i3], events[i4] = dict(events[i4], t=events[i3]["t"]), dict(events[i3], t=events[i4]["t"])
    v = verdict(events)
    assert not v["fifo"].passed and "receiver B" in v["fifo"].explanation and "A:0:3" in v["fifo"].explanation


def test_a_multicast_delivered_twice_fails_no_duplicates():
    """C delivers A's 2 twice: no_duplicates fails."""
    events = clean() + [mdeliver(3.0, "C", "A", 2)]
    v = verdict(events)
    assert not v["no_duplicates"].passed and "delivered A:0:2 from A twice" in v["no_duplicates"].explanation


def test_not_owed_to_a_member_outside_the_senders_view():
    """A sent 4 and 5 with view {A, B}: C is owed nothing of them (it was not in the view)."""
    events = [view(0.0, m, MEMBERS) for m in MEMBERS]
    for n in range(1, 6):
        members = MEMBERS if n <= 3 else ["A", "B"]
        t = 1.0 + n / 10
        events.append(msend(t, "A", n, members))
        events.extend(mdeliver(t + 0.001, m, "A", n) for m in members)
    v = verdict(events)
    assert v["no_loss"].passed and v["no_loss"].judged == 13


def test_a_member_that_leaves_the_senders_view_is_not_owed_what_came_just_before():
    """A multicasts 1..5 to {A, B, C}; C never delivers 4 and 5 and A installs {A, B} at t=1.6,
    within the bound of both: excused as left_view, not lost. Without that view change they are lost."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "C" and e["seqno"] >= 4)]
    v = verdict(events)
    assert not v["no_loss"].passed and v["no_loss"].details["lost"]["A->C"]["count"] == 2
    v = verdict(sorted(events + [view(1.6, "A", ["A", "B"])], key=lambda e: e["t"]))
    assert v["no_loss"].passed, v["no_loss"].explanation
    assert v["no_loss"].details["excused"]["left_view"] == 5


def test_a_multicast_to_a_member_cut_off_at_the_end_is_excused():
    """The link A->C is cut from t=1.45 to the end: what A sent after is not owed to C (cut_at_end)."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "C" and e["seqno"] >= 4)]
    cut = make_event(1.45, "harness", "harness", "fault_on", fault="partition", detail="A->C", links=["A->C"])
    v = verdict(sorted(events + [cut], key=lambda e: e["t"]))
    assert v["no_loss"].passed and v["no_loss"].details["excused"]["cut_at_end"] >= 2
