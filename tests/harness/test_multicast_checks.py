"""The checkers on multicast logs (NAKACK2's send/deliver events): a clean run of three members,
then one planted defect per test, each of which the right check must catch.

A multicast is owed to each other member of the sender's view when it was sent, by the unicast
rule (up and reachable for the recovery bound), unless the member was out of the sender's reach
from (nearly) the send until it left the sender's view (harness.checks, no_loss). The sender's own
(loopback) delivery is never on the network and is not owed.
"""

from __future__ import annotations

from splitbrain.harness.checks import run_checks
from splitbrain.node.events import make_event, validate_event

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
    """5 multicasts to 3 members: 10 owed (the sender's 5 loopback deliveries are not), all delivered."""
    v = verdict(clean())
    assert all(r.passed for r in v.values()), v
    assert v["no_loss"].judged == 10 and v["fifo"].judged == 15
    assert v["no_loss"].details["excused"]["loopback"] == 5


def test_a_multicast_missing_at_one_member_fails_no_loss():
    """C never delivers A's multicast 3: no_loss names A->C and the app id."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "C" and e["seqno"] == 3)]
    v = verdict(events)
    assert not v["no_loss"].passed
    assert v["no_loss"].details["lost"] == {"A->C": {"count": 1, "first": ["A:0:3"], "last_deliver_t": 1.501}}
    assert v["fifo"].passed and v["no_duplicates"].passed


def test_the_senders_own_delivery_is_not_owed():
    """The loopback delivery never crosses the network: A missing its own 2 is no loss, and counts
    nowhere as owed."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "A" and e["seqno"] == 2)]
    v = verdict(events)
    assert v["no_loss"].passed and v["no_loss"].judged == 10


def test_a_run_with_only_loopback_deliveries_judges_nothing():
    """B and C deliver none of A's 5 multicasts and A sent to a view of A alone: every check of
    deliveries saw only A's own, so each says it judged nothing (it does not pass)."""
    events = [view(0.0, "A", ["A"])]
    for n in range(1, 6):
        events += [msend(1 + n / 10, "A", n, ["A"]), mdeliver(1 + n / 10 + 0.001, "A", "A", n)]
    v = verdict(events)
    for name in ("fifo", "no_duplicates", "no_loss"):
        assert v[name].vacuous and not v[name].passed, v[name]
    assert "only loopback deliveries (5" in v["fifo"].explanation
    assert "5 the sender's own delivery of its multicast" in v["no_loss"].explanation


def test_b_and_c_missing_every_multicast_fails_even_with_loopback_delivered():
    """A delivers its own 5, B and C none: 10 owed, 10 lost (the loopback ones hide nothing)."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] in ("B", "C"))]
    v = verdict(events)
    assert not v["no_loss"].passed and v["no_loss"].judged == 10
    assert set(v["no_loss"].details["lost"]) == {"A->B", "A->C"}


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
    assert v["no_loss"].passed and v["no_loss"].judged == 3 * 2 + 2 * 1  # C owed only 1-3; loopbacks not owed


def _cut(t: float, links: list[str], on: bool = True) -> dict:
    kind = "fault_on" if on else "fault_off"
    return make_event(t, "harness", "harness", kind, fault="partition", detail=" ".join(links), links=links)


def test_a_member_cut_off_until_it_left_the_senders_view_is_not_owed_what_came_just_before():
    """A multicasts 1..5 to {A, B, C}; C never delivers 4 and 5; A and C are cut from 1.45 to 3.0
    and A installs {A, B} at t=1.6, so C was out of reach from within the bound of the sends until
    it left: excused as left_view (naming the messages), not lost, though the link heals later."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "C" and e["seqno"] >= 4)]
    v = verdict(events)
    assert not v["no_loss"].passed and v["no_loss"].details["lost"]["A->C"]["count"] == 2
    cut = [_cut(1.45, ["A->C", "C->A"]), view(1.6, "A", ["A", "B"]), _cut(3.0, ["A->C", "C->A"], on=False)]
    v = verdict(sorted(events + cut, key=lambda e: e["t"]))
    assert v["no_loss"].passed, v["no_loss"].explanation
    assert v["no_loss"].details["excused"]["left_view"] == 5
    assert "rule left_view: A->C A:0:1, A->C A:0:2" in v["no_loss"].explanation


def test_a_brief_shrink_of_a_reachable_member_excuses_nothing():
    """The same loss, and A's view drops C for 10 ms at 1.6 while C is connected the whole time: C
    was reachable when it was dropped, so 4 and 5 are still owed and lost (a shrink is no excuse)."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "C" and e["seqno"] >= 4)]
    shrink = [view(1.6, "A", ["A", "B"]), make_event(1.61, "A", "nakack2", "view", members=MEMBERS, view_id=30)]
    v = verdict(sorted(events + shrink, key=lambda e: e["t"]))
    assert not v["no_loss"].passed
    assert v["no_loss"].details["lost"]["A->C"]["first"] == ["A:0:4", "A:0:5"]
    assert v["no_loss"].details["excused"]["left_view"] == 0


def test_suspicion_slower_than_the_bound_is_no_loss():
    """A and C are cut from 1.0 (before every send) and A drops C only at 9.8, much later than the
    bound of 2 s after the sends; the link heals at 12 and stays up: C was out of reach from each
    send until it left A's view, so nothing was owed to it."""
    events = [_cut(1.0, ["A->C", "C->A"])]
    events += [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "C")]
    events += [view(9.8, "A", ["A", "B"]), _cut(12.0, ["A->C", "C->A"], on=False)]
    v = verdict(sorted(events, key=lambda e: e["t"]))
    assert v["no_loss"].passed, v["no_loss"].explanation
    assert v["no_loss"].details["excused"]["left_view"] == 5


def test_a_multicast_to_a_member_cut_off_at_the_end_is_excused():
    """The link A->C is cut from t=1.45 to the end: what A sent after is not owed to C (cut_at_end)."""
    events = [e for e in clean() if not (e["kind"] == "deliver" and e["node"] == "C" and e["seqno"] >= 4)]
    cut = make_event(1.45, "harness", "harness", "fault_on", fault="partition", detail="A->C", links=["A->C"])
    v = verdict(sorted(events + [cut], key=lambda e: e["t"]))
    assert v["no_loss"].passed and v["no_loss"].details["excused"]["cut_at_end"] >= 2


# ---- a member that joins later is owed what its join digest says --------------------


def start(t: float, node: str, incarnation: int = 0) -> dict:
    return make_event(t, node, "node", "node_start", incarnation=incarnation)


def join_view(t: float, node: str, members, digest: list[str]) -> dict:
    return make_event(
        t, node, "gms", "view", members=list(members), view_id=9, coord=members[0], reason="join", digest=digest
    )


def late_join(digest: list[str], missing_at_c: tuple[int, ...] = (1, 2, 3)) -> list[dict]:
    """A and B from t=0; C starts at 2.0. A multicasts 1..3 at 2.1-2.3 to a view that still lists C
    (from a previous life), C never gets them; C's first view, at 2.5, is a join with `digest`;
    A then multicasts 4 and 5, which every member delivers. B also logs the join view."""
    events = [start(0.0, "A"), start(0.0, "B")]
    events += [view(0.0, m, MEMBERS) for m in ("A", "B")]
    events.append(start(2.0, "C", 1))
    for n in (1, 2, 3):
        t = 2.0 + n / 10
        events.append(msend(t, "A", n))
        events += [mdeliver(t + 0.001, m, "A", n) for m in ("A", "B")]
        if n not in missing_at_c:
            events.append(mdeliver(t + 0.001, "C", "A", n))
    events += [join_view(2.5, "C", MEMBERS, digest), join_view(2.5, "B", MEMBERS, digest)]
    for n in (4, 5):
        t = 2.6 + n / 10
        events.append(msend(t, "A", n))
        events += [mdeliver(t + 0.001, m, "A", n) for m in MEMBERS]
    return events


def test_a_joiner_is_not_owed_what_its_join_digest_puts_before_it():
    """C joins with digest A:3: A's multicasts 1-3, sent before C's join view, are not owed to C."""
    v = verdict(late_join(["A:3", "B:0"]))
    assert v["no_loss"].passed, v["no_loss"].explanation
    assert v["no_loss"].details["excused"]["join_digest"] == 3
    assert v["no_loss"].judged == 5 * 2 - 3
    assert "3 multicast at or below a joiner's join digest" in v["no_loss"].explanation


def test_a_joiner_is_owed_what_lies_above_its_join_digest():
    """C joins with digest A:2: A's multicast 3 was sent to a view with C above the digest, so C
    owes it; no_loss fails naming A->C and A:0:3 (1 and 2 excused)."""
    v = verdict(late_join(["A:2"]))
    assert not v["no_loss"].passed
    assert v["no_loss"].details["lost"]["A->C"]["first"] == ["A:0:3"]
    assert v["no_loss"].details["excused"]["join_digest"] == 2


def test_a_join_digest_excuses_nothing_at_an_old_member_or_sent_after_the_join():
    """The join view B logs too (it is not B's first view) excuses nothing at B; a multicast sent
    after C's join view is owed to C whatever its seqno; a digest for another sender excuses nothing."""
    events = late_join(["A:3"])
    events = [e for e in events if not (e["kind"] == "deliver" and e["node"] == "B" and e["seqno"] == 2)]
    v = verdict(events)
    assert v["no_loss"].details["lost"] == {"A->B": {"count": 1, "first": ["A:0:2"], "last_deliver_t": 3.101}}
    events = [e for e in late_join(["A:9"]) if not (e["kind"] == "deliver" and e["node"] == "C" and e["seqno"] == 5)]
    assert verdict(events)["no_loss"].details["lost"]["A->C"]["first"] == ["A:0:5"]
    v = verdict(late_join(["B:3"]))
    assert v["no_loss"].details["lost"]["A->C"]["count"] == 3
    assert v["no_loss"].details["excused"]["join_digest"] == 0


def test_a_join_digest_does_not_excuse_what_the_sender_sent_to_a_view_with_the_joiner():
    """A installs the join view (id 9, with C) at 2.05, before its multicasts 1-3: it addressed them
    to C, so C's digest A:3 excuses nothing and C's three misses are lost."""
    events = sorted(late_join(["A:3"]) + [join_view(2.05, "A", MEMBERS, ["A:0"])], key=lambda e: e["t"])
    v = verdict(events)
    assert not v["no_loss"].passed
    assert v["no_loss"].details["lost"]["A->C"]["first"] == ["A:0:1", "A:0:2", "A:0:3"]
    assert v["no_loss"].details["excused"]["join_digest"] == 0


def _final_window(t: float, node: str, side: str, peer: str, low: int, high: int) -> dict:
    return make_event(t, node, "mcast", "window", side=side, peer=peer, low=low, high=high, final=True)


def _restarted_sender(multicast_after: bool) -> list[dict]:
    """A multicasts 5 to B, restarts at 2 s (and multicasts once more, or not); final windows at 5 s."""
    events = [make_event(0.0, n, "node", "node_start", incarnation=0) for n in ("A", "B")]
    for n in range(1, 6):
        events.append(make_event(1 + n / 10, "A", "mcast", "send", members=["A", "B"], seqno=n, app=f"A:0:{n}"))
        events.append(make_event(1 + n / 10 + 0.01, "B", "mcast", "deliver", peer="A", seqno=n, app=f"A:0:{n}"))
    events.append(make_event(2.0, "A", "node", "node_stop", reason="restart", incarnation=0))
    events.append(make_event(2.0, "A", "node", "node_start", incarnation=1))
    high = 0
    if multicast_after:
        high = 1
        events.append(make_event(3.0, "A", "mcast", "send", members=["A", "B"], seqno=1, app="A:1:1"))
        events.append(make_event(3.01, "B", "mcast", "deliver", peer="A", seqno=1, app="A:1:1"))
    events.append(_final_window(5.0, "A", "send", "B", 0, high))
    events.append(_final_window(5.0, "B", "recv", "A", 5, 5))
    return events


def test_a_restarted_multicast_sender_that_sent_nothing_since_leaves_a_stale_window_not_a_failure():
    """After A restarts and multicasts nothing, B's window of A's old life is stale (reported), no
    failure; once A multicasts again the windows are judged, and these (A at 1, B at 5) differ."""
    silent = run_checks(_restarted_sender(False), ["windows_synced"])[0]
    assert silent.passed is False and silent.vacuous  # nothing judged, said so
    assert silent.details["stale_recv"] == ["A->B"]
    sent = run_checks(_restarted_sender(True), ["windows_synced"])[0]
    assert not sent.passed and not sent.vacuous and sent.details["stale_recv"] == []


def test_a_restarted_multicast_receiver_is_idle_with_a_sender_that_has_nothing_outstanding():
    """B restarts after A's 5 multicasts were acked and holds an empty window for A: an idle pair,
    in sync; if A had a multicast outstanding (HS above HA), the pair is out of sync."""

    def run(acked: int) -> object:
        events = [make_event(0.0, n, "node", "node_start", incarnation=0) for n in ("A", "B")]
        for n in range(1, 6):
            events.append(make_event(1 + n / 10, "A", "mcast", "send", members=["A", "B"], seqno=n, app=f"A:0:{n}"))
            events.append(make_event(1 + n / 10 + 0.01, "B", "mcast", "deliver", peer="A", seqno=n, app=f"A:0:{n}"))
        events.append(make_event(2.0, "B", "node", "node_stop", reason="restart", incarnation=0))
        events.append(make_event(2.0, "B", "node", "node_start", incarnation=1))
        events.append(_final_window(5.0, "A", "send", "B", acked, 5))
        events.append(_final_window(5.0, "B", "recv", "A", 0, 0))
        return run_checks(events, ["windows_synced"])[0]

    idle = run(5)
    assert idle.passed and idle.details["pairs"]["A->B"]["synced"]
    behind = run(4)
    assert not behind.passed and "HA=4 HS=5, B has no recv window" in behind.explanation


# ---- a multicast redelivered to a restarted receiver: excused only while not acked by all ----------


def _redelivered(acks: dict[str, int]) -> list[dict]:
    """A multicasts 1..3 to {A, B, C}; everyone delivers them; A receives the MCAST acks `acks`
    (member -> seqno) at 1.5; B restarts at 2.0 and delivers A's 1..3 again at 2.5."""
    events = [make_event(0.0, n, "node", "node_start", incarnation=0) for n in MEMBERS]
    for n in (1, 2, 3):
        t = 1.0 + n / 10
        events.append(make_event(t, "A", "mcast", "send", members=MEMBERS, seqno=n, app=f"A:0:{n}"))
        events += [make_event(t + 0.01, m, "mcast", "deliver", peer="A", seqno=n, app=f"A:0:{n}") for m in MEMBERS]
    events += [make_event(1.5, "A", "mcast", "ack_rx", peer=m, seqno=n) for m, n in acks.items()]
    events.append(make_event(2.0, "B", "node", "node_stop", reason="restart", incarnation=0))
    events.append(make_event(2.0, "B", "node", "node_start", incarnation=1))
    events += [make_event(2.5, "B", "mcast", "deliver", peer="A", seqno=n, app=f"A:0:{n}") for n in (1, 2, 3)]
    return events


def test_a_multicast_redelivered_after_a_restart_is_excused_while_a_member_has_not_acked_it():
    """B acked all 3, C only 1: A could purge only 1, so 2 and 3 may legitimately come back to the
    restarted B; 1 may not (every member acked it, the sender could have purged it): a duplicate."""
    r = run_checks(_redelivered({"B": 3, "C": 1}), ["no_duplicates"])[0]
    assert not r.passed and r.details["duplicates"] == 1
    assert r.details["first"][0]["app"] == "A:0:1" and "had seen it acked" in r.details["first"][0]["why"]
    assert r.details["redelivered_by_cause"]["receiver_restarted"] == 2


def test_a_multicast_redelivered_after_a_restart_with_no_ack_at_all_is_excused():
    """No ack reached A: nothing could be purged, the 3 redeliveries to the restarted B are excused."""
    r = run_checks(_redelivered({}), ["no_duplicates"])[0]
    assert r.passed and r.details["redelivered_by_cause"]["receiver_restarted"] == 3


def test_stable_digests_are_a_multicast_ack_too():
    """NAKACK2's STABLE digests (stable_rx) count as the members' acks: with B and C at A:3, all 3
    redeliveries to the restarted B are duplicates."""
    events = [
        dict(e, proto="nakack2") if e["proto"] == "mcast" else e for e in _redelivered({}) if e["kind"] != "ack_rx"
    ]
    events += [make_event(1.5, "A", "nakack2", "stable_rx", peer=m, digest=["A:3", "B:0"]) for m in ("B", "C")]
    r = run_checks(sorted(events, key=lambda e: e["t"]), ["no_duplicates"])[0]
    assert not r.passed and r.details["duplicates"] == 3


# ---- resync_traffic: what each multicast protocol declares ------------------------------------------


def test_resync_traffic_counts_nakack2_catch_up_and_says_mcast_has_none():
    """NAKACK2's catch-up of a joiner (retransmit, reason catch_up) is its resync traffic; an
    XMIT-REQ answer is not. MCAST declares none: the check names it as not applicable."""
    nak = [
        make_event(1.0, "A", "nakack2", "retransmit", peer="C", seqno=4, origin="A", reason="catch_up"),
        make_event(1.1, "A", "nakack2", "retransmit", peer="C", seqno=5, origin="A", reason="xmit_req"),
    ]
    r = run_checks(nak, ["resync_traffic"], resync_bound=0)[0]
    assert not r.passed and r.details["pairs"]["A<->C"]["by_kind"] == {"retransmit(catch_up)": 1}
    mc = [make_event(1.0, "B", "mcast", "ack_rx", peer="A", seqno=3)]
    r = run_checks(mc, ["resync_traffic"], resync_bound=0)[0]
    assert r.vacuous and "not applicable to mcast" in r.explanation
