"""Example tests of the event-log checkers (harness.checks) and the log reader (harness.eventlog).

Each test builds a tiny synthetic log with node.events.make_event: a clean two-node transfer A->B,
then one planted defect, and asserts both the verdict and the explanation a person would read.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from splitbrain.harness.checks import GENERAL_CHECKS, CheckResult, run_checks
from splitbrain.harness.eventlog import EventLogError, read_events, read_run, write_events
from splitbrain.node.events import make_event, validate_event

END = 10.0  # when the surviving nodes write their final windows


# ---- event builders ---------------------------------------------------------------------------


def start(t: float, node: str, incarnation: int = 0) -> dict:
    return make_event(t, node, "node", "node_start", incarnation=incarnation)


def stop(t: float, node: str, reason: str = "kill") -> dict:
    return make_event(t, node, "node", "node_stop", reason=reason)


def send(t: float, x: str, y: str, n: int, conn: int = 1, stream: int = 0) -> dict:
    return make_event(t, x, "unicast3", "send", peer=y, seqno=n + 1, conn_id=conn, app=f"{x}:{stream}:{n}")


def deliver(t: float, y: str, x: str, n: int, conn: int = 1, stream: int = 0) -> dict:
    return make_event(t, y, "unicast3", "deliver", peer=x, seqno=n + 1, conn_id=conn, app=f"{x}:{stream}:{n}")


def ack_rx(t: float, x: str, y: str, seqno: int, conn: int = 1) -> dict:
    return make_event(t, x, "unicast3", "ack_rx", peer=y, seqno=seqno, conn_id=conn)


def window(node: str, peer: str, side: str, low: int, high: int, conn: int = 1, t: float = END) -> dict:
    return make_event(
        t, node, "unicast3", "window", peer=peer, side=side, conn_id=conn, low=low, high=high, state="OPEN", final=True
    )


def harness_fault(t: float, kind: str, fault: str, detail: str = "A<->B", links: list[str] | None = None) -> dict:
    return make_event(t, "harness", "harness", kind, fault=fault, detail=detail, links=links)


def conn_state(t: float, node: str, peer: str, side: str, state: str, reason: str) -> dict:
    return make_event(t, node, "unicast3", "conn_state", peer=peer, side=side, state=state, reason=reason)


def error(t: float, node: str, reason: str) -> dict:
    return make_event(t, node, "unicast3", "error", reason=reason, detail="Traceback ...")


def transfer(x: str, y: str, count: int, t0: float = 1.0, conn: int = 1) -> list[dict]:
    """count messages x->y, each sent, delivered and acked 0.1 s apart."""
    events = []
    for n in range(count):
        t = t0 + n * 0.1
        events += [send(t, x, y, n, conn), deliver(t + 0.01, y, x, n, conn), ack_rx(t + 0.02, x, y, n + 1, conn)]
    return events


def clean_run(count: int = 3) -> list[dict]:
    """A and B up, A sends count messages to B, both report matching final windows."""
    return (
        [start(0.0, "A"), start(0.0, "B")]
        + transfer("A", "B", count)
        + [window("A", "B", "send", count, count), window("B", "A", "recv", count, count)]
    )


def result(events: list[dict], name: str) -> CheckResult:
    (res,) = run_checks(events, [name])
    return res


# ---- all checks -------------------------------------------------------------------------------


def test_clean_log_passes_every_check():
    """Clean transfer A->B with synced windows: every check passes."""
    events = clean_run()
    for ev in events:
        validate_event(ev)
    results = run_checks(events)
    assert [r.name for r in results] == list(GENERAL_CHECKS)
    assert all(r.passed for r in results), [r.explanation for r in results]
    assert [r.judged for r in results] == [3, 3, 3, 1, len(events)]


def test_aggregated_drops_of_bad_frames_change_no_check():
    """A clean transfer while B drops a garbage flood (drop lines with a count): every check
    passes as without it."""
    drops = [
        make_event(t, "B", "transport", "drop", reason="malformed frame: truncated", count=n)
        for t, n in ((0.5, 1), (1.5, 4000), (2.5, 17))
    ]
    events = sorted(clean_run() + drops, key=lambda ev: ev["t"])
    for ev in events:
        validate_event(ev)
    results = run_checks(events)
    assert all(r.passed for r in results), [r.explanation for r in results]
    assert [r.judged for r in results] == [3, 3, 3, 1, len(events)]


def test_empty_log_is_vacuous_in_every_check():
    """Empty log: no check passes; each says it judged nothing."""
    results = run_checks([])
    assert [(r.passed, r.vacuous, r.judged) for r in results] == [(False, True, 0)] * len(GENERAL_CHECKS)
    assert all(r.explanation.startswith("judged nothing: ") for r in results)


def test_sends_without_deliveries_are_not_a_silent_pass():
    """500 sent, none delivered, receiver dead: fifo and no_duplicates judged nothing, no_loss owed none."""
    events = [start(0.0, "A"), start(0.0, "B"), stop(0.5, "B")]
    events += [send(1.0 + n * 0.01, "A", "B", n) for n in range(500)]
    by_name = {r.name: r for r in run_checks(events)}
    for name in ("fifo", "no_duplicates", "no_loss"):
        assert by_name[name].vacuous and not by_name[name].passed, name
    assert not by_name["windows_synced"].passed  # A sent and reported no window: not reported
    assert by_name["no_loss"].explanation == (
        "judged nothing: none of 500 sent messages was owed (500 receiver dead at the end)"
    )


def test_unknown_check_name_is_rejected():
    """Asking for a check that does not exist raises ValueError naming it."""
    with pytest.raises(ValueError, match="'linearizable'"):
        run_checks(clean_run(), ["fifo", "linearizable"])


def test_check_result_is_frozen_and_serialisable():
    """CheckResult is immutable and to_dict() round-trips through JSON."""
    res = result(clean_run(), "fifo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.passed = False  # type: ignore[misc]
    assert json.loads(json.dumps(res.to_dict())) == {
        "name": "fifo",
        "passed": True,
        "explanation": "3 deliveries in FIFO order",
        "details": {"deliveries": 3, "violations": 0, "first": []},
        "judged": 3,
        "vacuous": False,
    }


def test_unsorted_log_is_ordered_by_time():
    """Events given out of time order are checked in time order, not list order."""
    events = clean_run()
    assert all(r.passed for r in run_checks(list(reversed(events))))


# ---- fifo -------------------------------------------------------------------------------------


def test_fifo_reordered_delivery_fails():
    """Reordered delivery: B delivers A:0:2 before A:0:1."""
    events = [
        start(0.0, "A"),
        start(0.0, "B"),
        deliver(1.0, "B", "A", 0),
        deliver(1.5, "B", "A", 2),
        deliver(2.0, "B", "A", 1),
    ]
    res = result(events, "fifo")
    assert not res.passed
    assert res.explanation == (
        "receiver B (incarnation 0) delivered A:0:1 after A:0:2 from A "
        "(conn 1, stream 0) at t=2.000 with no discard of its window in between; "
        "1 FIFO violation(s) in total"
    )
    assert res.details["violations"] == 1


def test_fifo_ignores_gaps_duplicates_and_other_streams():
    """Gaps, a repeated n and an interleaved second stream are not FIFO violations."""
    events = [
        start(0.0, "B"),
        deliver(1.0, "B", "A", 0),
        deliver(1.1, "B", "A", 5, stream=1),
        deliver(1.2, "B", "A", 3),
        deliver(1.3, "B", "A", 3),
        deliver(1.4, "B", "A", 0, stream=1),
    ]
    # Stream 1 goes 5 then 0: that one is a violation, stream 0 (a gap and a duplicate) is not.
    res = result(events, "fifo")
    assert res.details["violations"] == 1
    assert res.details["first"][0]["stream"] == 1


def test_fifo_restarts_with_receiver_incarnation():
    """Receiver restarted: the new incarnation may deliver lower n again without a violation."""
    events = [start(0.0, "B"), deliver(1.0, "B", "A", 4), stop(2.0, "B"), start(3.0, "B", 1), deliver(4.0, "B", "A", 2)]
    assert result(events, "fifo").passed


def test_fifo_order_regression_across_a_rekey_fails():
    """SYNC re-key on a live window (new conn_id, no CLOSED): going back from 4 to 2 is a violation."""
    events = [
        start(0.0, "A"),
        start(0.0, "B"),
        deliver(1.0, "B", "A", 4, conn=1),
        conn_state(1.5, "B", "A", "recv", "OPEN", "sync: re-keyed"),
        conn_state(1.5, "B", "A", "recv", "OPEN", "new_window:sync"),
        deliver(2.0, "B", "A", 2, conn=2),
    ]
    res = result(events, "fifo")
    assert not res.passed
    assert res.details["first"][0]["app"] == "A:0:2"


def test_fifo_starts_afresh_after_the_window_closed():
    """B's window for A CLOSED (reaped): A's resend of an earlier n is no FIFO violation."""
    events = [
        start(0.0, "A"),
        start(0.0, "B"),
        deliver(1.0, "B", "A", 4),
        conn_state(1.5, "B", "A", "recv", "CLOSED", "close_rx"),
        deliver(2.0, "B", "A", 2, conn=2),
    ]
    assert result(events, "fifo").passed


# ---- no_duplicates ----------------------------------------------------------------------------


def test_duplicate_delivery_fails():
    """Duplicate: B delivers A:0:1 twice on the same connection."""
    events = clean_run() + [deliver(5.0, "B", "A", 1)]
    res = result(events, "no_duplicates")
    assert not res.passed
    assert res.explanation == (
        "receiver B (incarnation 0) delivered A:0:1 from A twice, at t=1.110 and "
        "t=5.000 (no discard of its window in between); 1 duplicate delivery(ies) in total"
    )
    assert res.details["duplicates"] == 1


def unacked_run() -> list[dict]:
    """A sends A:0:0..2 to B, B delivers them, no ack reaches A."""
    return [start(0.0, "A"), start(0.0, "B"), conn_state(0.9, "A", "B", "send", "OPEN", "created")] + [
        ev for n in range(3) for ev in (send(1.0 + n * 0.1, "A", "B", n), deliver(1.01 + n * 0.1, "B", "A", n))
    ]


def test_redelivery_under_new_conn_id_without_discard_fails():
    """Re-key by SYNC on a live window: B delivers A:0:0..1 again under conn 2; that is a duplicate."""
    events = unacked_run() + [
        conn_state(5.0, "B", "A", "recv", "OPEN", "sync: re-keyed"),
        deliver(6.0, "B", "A", 0, conn=2),
        deliver(6.1, "B", "A", 1, conn=2),
    ]
    res = result(events, "no_duplicates")
    assert not res.passed
    assert res.details["duplicates"] == 2


def test_redelivery_of_unacked_after_window_closed_is_counted_not_failed():
    """B's window for A CLOSED (CLOSE received); A resends the unacked A:0:0..1: counted by cause."""
    events = unacked_run() + [
        conn_state(5.0, "B", "A", "recv", "CLOSED", "close_rx"),
        deliver(6.0, "B", "A", 0, conn=2),
        deliver(6.1, "B", "A", 1, conn=2),
    ]
    res = result(events, "no_duplicates")
    assert res.passed, res.explanation
    assert res.details["redelivered_after_reset"] == 2
    assert res.details["redelivered_by_cause"] == {"receiver_restarted": 0, "window_closed": 2}
    assert "2 unacked app id(s) legitimately redelivered" in res.explanation


def test_redelivery_after_the_protocol_replaced_its_window_fails():
    """B's window CLOSED with reason "replaced" (the protocol's own resync): no excuse for a redelivery."""
    events = unacked_run() + [
        conn_state(5.0, "B", "A", "recv", "CLOSED", "replaced"),
        deliver(6.0, "B", "A", 0, conn=2),
    ]
    assert not result(events, "no_duplicates").passed
    assert not result(events + [deliver(6.1, "B", "A", 2, conn=2), deliver(6.2, "B", "A", 1, conn=2)], "fifo").passed


def test_redelivery_of_acked_after_window_closed_fails():
    """A saw A:0:0..1 acked, then B's window CLOSED and B delivers them again: duplicates."""
    events = unacked_run() + [
        ack_rx(2.0, "A", "B", 2),
        conn_state(5.0, "B", "A", "recv", "CLOSED", "close_rx"),
        deliver(6.0, "B", "A", 0, conn=2),
        deliver(6.1, "B", "A", 1, conn=2),
        deliver(6.2, "B", "A", 2, conn=2),
    ]
    res = result(events, "no_duplicates")
    assert not res.passed
    assert res.details["duplicates"] == 2  # A:0:2 was never acked: its redelivery is excused
    assert "the sender had seen it acked" in res.explanation


def test_an_ack_at_the_same_instant_as_the_redelivery_does_not_count():
    """Zero-latency link: A's ack of A:0:1 is logged at the very time of B's redelivery after a restart."""
    events = [
        start(0.0, "A"),
        start(0.0, "B"),
        send(0.9, "A", "B", 0),
        deliver(1.0, "B", "A", 0),
        stop(2.0, "B", "crash"),
        start(3.0, "B", 1),
        ack_rx(4.0, "A", "B", 1),
        deliver(4.0, "B", "A", 0),
    ]
    assert result(events, "no_duplicates").passed


def test_acks_of_an_earlier_send_window_do_not_count():
    """A's send window was recreated (seqnos from 1 again): acks of the old one cover nothing new."""
    events = unacked_run() + [
        ack_rx(2.0, "A", "B", 3),
        conn_state(3.0, "A", "B", "send", "OPEN", "created"),
        send(3.1, "A", "B", 7),
        deliver(3.2, "B", "A", 7),
        conn_state(5.0, "B", "A", "recv", "CLOSED", "close_rx"),
        deliver(6.0, "B", "A", 7),
    ]
    # A:0:7 went out as seqno 8 of the new window, which nothing acked.
    assert result(events, "no_duplicates").passed


def test_redelivery_by_new_receiver_incarnation_is_excused_if_unacked():
    """Receiver restarted: its new incarnation may deliver an app id again only if A never saw it acked."""
    events = [
        start(0.0, "A"),
        start(0.0, "B"),
        send(0.9, "A", "B", 0),
        deliver(1.0, "B", "A", 0),
        stop(2.0, "B", "crash"),
        start(3.0, "B", 1),
        deliver(4.0, "B", "A", 0),
    ]
    res = result(events, "no_duplicates")
    assert res.passed
    assert res.details["redelivered_by_cause"]["receiver_restarted"] == 1
    acked = events[:4] + [ack_rx(1.5, "A", "B", 1)] + events[4:]
    assert not result(acked, "no_duplicates").passed


# ---- no_loss ----------------------------------------------------------------------------------


def test_missing_delivery_fails():
    """Loss: A sends A:0:3 and A:0:4 to B, B never delivers them."""
    events = clean_run() + [send(4.0, "A", "B", 3), send(4.1, "A", "B", 4), start(0.0, "C"), deliver(5.0, "C", "A", 0)]
    res = result(events, "no_loss")
    assert not res.passed
    assert res.explanation == (
        "2 of 5 owed message(s) lost: A->B: 2 never delivered (first A:0:3 A:0:4; "
        "last delivery on this link t=1.210); last delivery anywhere t=5.000"
    )
    assert res.details["lost"]["A->B"]["count"] == 2


def test_receiver_killed_soon_after_send_is_not_loss():
    """Receiver B killed 0.5 s after A sent A:0:3 (bound 4.5 s): A:0:3 is excused, the rest are owed."""
    events = clean_run() + [send(6.5, "A", "B", 3), stop(7.0, "B", "kill")]
    res = result(events, "no_loss")
    assert res.passed, res.explanation
    assert res.details["excused"]["receiver_dead"] == 1
    assert res.judged == 3
    assert res.explanation == (
        "all 3 owed messages delivered (owed: 4.5s of connection after sending); 1 not owed: 1 receiver dead at the end"
    )


def test_late_kill_of_the_receiver_excuses_nothing_owed():
    """Receiver B killed 9 s after A sent A:0:3 and A:0:4: they were owed and are lost."""
    events = clean_run() + [send(4.0, "A", "B", 3), send(4.1, "A", "B", 4), stop(13.0, "B", "kill")]
    res = result(events, "no_loss")
    assert not res.passed
    assert res.details["lost"]["A->B"]["count"] == 2


def test_late_restart_of_the_sender_excuses_nothing_owed():
    """Sender A restarted 9 s after sending A:0:3: it had 9 s to deliver it, so it is lost."""
    events = clean_run() + [send(4.0, "A", "B", 3), stop(13.0, "A", "restart"), start(13.0, "A", 1)]
    res = result(events, "no_loss")
    assert not res.passed
    assert res.details["lost"]["A->B"]["first"] == ["A:0:3"]


def test_sender_restarted_soon_after_send_is_not_loss():
    """Sender A restarted 0.5 s after sending A:0:3: its send window was lost, so A:0:3 is excused."""
    events = clean_run() + [send(6.5, "A", "B", 3), stop(7.0, "A"), start(7.5, "A", 1)]
    res = result(events, "no_loss")
    assert res.passed, res.explanation
    assert res.details["excused"]["sender_lost_window"] == 1


def test_partition_until_the_kill_excuses_only_what_was_cut():
    """A->B cut from 3 s to 9 s, B killed at 10 s: messages sent during the cut had 1 s after the
    heal (less than the bound): excused; those sent at 1 s had 2 s before the cut: also excused;
    a recovery bound of 0.5 s owes them all."""
    cut = ["A->B"]
    events = clean_run() + [
        harness_fault(3.0, "fault_on", "partition", links=cut),
        send(4.0, "A", "B", 3),
        harness_fault(9.0, "fault_off", "partition", links=cut),
        stop(10.0, "B"),
    ]
    res = result(events, "no_loss")
    assert res.vacuous and res.details["excused"]["receiver_dead"] == 4
    (strict,) = run_checks(events, ["no_loss"], recovery_bound_s=0.5)
    assert not strict.passed and strict.details["lost"]["A->B"]["first"] == ["A:0:3"]


def test_delivery_by_earlier_receiver_incarnation_counts():
    """Receiver B restarted after delivering: the delivery by its old incarnation still counts."""
    events = clean_run() + [stop(5.0, "B"), start(6.0, "B", 1)]
    assert result(events, "no_loss").passed


# ---- windows_synced ---------------------------------------------------------------------------


def test_never_synced_window_fails():
    """Never synced: A sent 5 but B delivered 3 and A saw acks up to 3."""
    events = clean_run()[:-2] + [window("A", "B", "send", 3, 5), window("B", "A", "recv", 3, 3)]
    res = result(events, "windows_synced")
    assert not res.passed
    assert res.explanation == "A->B A send conn 1 HA=3 HS=5, B recv conn 1 delivered=3 received=3"
    assert res.details["pairs"]["A->B"]["synced"] is False
    assert res.details["pairs"]["A->B"]["sync_time"] is None


def test_conn_id_mismatch_fails():
    """conn_id mismatch: A's send window is on conn 2, B's recv window still on conn 1."""
    events = clean_run()[:-2] + [window("A", "B", "send", 3, 3, conn=2), window("B", "A", "recv", 3, 3)]
    res = result(events, "windows_synced")
    assert not res.passed
    assert res.explanation == ("A->B conn_id mismatch: A send conn 2 HA=3 HS=3, B recv conn 1 delivered=3 received=3")


def test_missing_recv_window_with_outstanding_messages_fails():
    """B has no recv window for A while A still has unacked messages."""
    events = clean_run()[:-2] + [window("A", "B", "send", 2, 3), window("B", "C", "recv", 0, 0)]
    res = result(events, "windows_synced")
    assert not res.passed
    assert res.explanation == "A->B A send conn 1 HA=2 HS=3, B has no recv window"


def test_idle_pair_without_recv_window_is_synced():
    """Idle: A's window has HA == HS and B has no recv window for A at all; that is in sync."""
    events = clean_run()[:-1] + [window("B", "C", "send", 0, 0)]
    res = result(events, "windows_synced")
    assert res.passed, res.explanation
    assert res.details["pairs"]["A->B"]["synced"] is True


def test_node_without_final_windows_fails():
    """B alive at the end with traffic but wrote no final windows: windows not reported."""
    events = clean_run()[:-1]
    res = result(events, "windows_synced")
    assert not res.passed
    assert res.explanation == "final windows not reported by B (alive at end, with open windows)"
    assert res.details["not_reported"] == ["B"]


def test_node_with_an_open_window_it_did_not_report_fails():
    """B's conn_state says its window for A is open, but B reported only a window for C."""
    events = clean_run()[:-1] + [
        conn_state(0.5, "B", "A", "recv", "OPEN", "new_window:first"),
        window("B", "C", "send", 0, 0),
    ]
    res = result(events, "windows_synced")
    assert res.details["not_reported"] == ["B"]


def test_a_graceful_stop_does_not_hide_an_unreported_window():
    """Live runs end with node_stop reason "stop" after the final windows: B's missing one still counts."""
    events = clean_run()[:-1] + [
        conn_state(0.5, "B", "A", "recv", "OPEN", "new_window:first"),
        stop(END + 0.1, "A", "stop"),
        stop(END + 0.1, "B", "stop"),
    ]
    res = result(events, "windows_synced")
    assert not res.passed and res.details["not_reported"] == ["B"]


def test_reaped_windows_are_not_expected_at_the_end():
    """Both windows reaped (CLOSED) before the end: nothing to report, the A->B pair is judged from A."""
    events = clean_run()[:-1] + [
        conn_state(0.5, "B", "A", "recv", "OPEN", "new_window:first"),
        conn_state(5.0, "B", "A", "recv", "CLOSED", "close_rx"),
    ]
    res = result(events, "windows_synced")
    assert res.passed, res.explanation


def test_dead_node_windows_are_not_checked():
    """B killed at the end: A's out-of-sync window for B and B's missing windows are skipped."""
    events = clean_run()[:-2] + [send(4.0, "A", "B", 3), stop(4.5, "B"), window("A", "B", "send", 3, 4)]
    res = result(events, "windows_synced")
    assert res.vacuous and not res.passed
    assert res.details["skipped_dead"] == 1
    assert res.explanation == (
        "judged nothing: no final send window of a pair alive at the end (1 pair(s) with a dead end skipped)"
    )


def test_no_heal_gives_no_sync_time():
    """No heal in the run: no time-after-heal is made up from the last delivery."""
    res = result(clean_run(), "windows_synced")
    assert res.details["last_heal_t"] is None and res.details["max_sync_time"] is None
    assert res.explanation == "1 pair(s) in sync (no heal in this run)"


# ---- no_errors --------------------------------------------------------------------------------


def test_error_event_fails_no_errors():
    """An exception inside a layer (an error event) fails no_errors, naming node, time and reason."""
    res = result(clean_run() + [error(2.0, "B", "KeyError: 7")], "no_errors")
    assert not res.passed
    assert res.explanation == ("1 internal error(s) in the protocol stack; first at B t=2.000: KeyError: 7")


def test_sync_time_is_measured_from_last_heal():
    """Partition healed at t=5 and t=7; last deliver at 7.5 and last ack at 8.25 give sync_time 1.25."""
    events = clean_run()[:-2] + [
        harness_fault(2.0, "fault_on", "partition"),
        harness_fault(5.0, "fault_off", "partition"),
        harness_fault(6.0, "fault_on", "loss"),
        harness_fault(7.0, "fault_off", "loss"),
        send(7.4, "A", "B", 3),
        deliver(7.5, "B", "A", 3),
        ack_rx(8.25, "A", "B", 4),
        window("A", "B", "send", 4, 4),
        window("B", "A", "recv", 4, 4),
    ]
    res = result(events, "windows_synced")
    assert res.passed, res.explanation
    assert res.details["last_heal_t"] == 7.0
    assert res.details["pairs"]["A->B"]["sync_time"] == pytest.approx(1.25)
    assert res.details["max_sync_time"] == pytest.approx(1.25)
    assert res.explanation == "1 pair(s) in sync, max sync time 1.250s after last heal at t=7.000"


def test_sync_time_is_zero_when_synced_before_heal():
    """Heal fault_on at t=9 after everything settled at t~1.2: sync_time clamps to 0."""
    events = clean_run() + [harness_fault(9.0, "fault_on", "heal", "all")]
    res = result(events, "windows_synced")
    assert res.details["last_heal_t"] == 9.0
    assert res.details["max_sync_time"] == 0.0


# ---- eventlog ---------------------------------------------------------------------------------


def test_write_events_and_read_run_round_trip(tmp_path):
    """Run directory round trip: per-node logs plus timeline come back merged and time-sorted."""
    events = clean_run() + [harness_fault(0.5, "fault_on", "partition")]
    run = tmp_path / "runs" / "demo-1-0"
    for node in ("A", "B"):
        write_events(run / "nodes" / node / "events.jsonl", [e for e in events if e["node"] == node])
    write_events(run / "timeline.jsonl", [e for e in events if e["node"] == "harness"])
    merged = read_run(run)
    assert sorted(map(json.dumps, merged)) == sorted(map(json.dumps, events))
    assert [e["t"] for e in merged] == sorted(e["t"] for e in events)
    # Equal times keep file order: A's files come before B's, and A's start before B's.
    assert [e["node"] for e in merged[:2]] == ["A", "B"]
    assert (run / "timeline.jsonl").read_text().splitlines()[0] == json.dumps(events[-1], separators=(",", ":"))
    assert all(r.passed for r in run_checks(merged))


def test_bad_json_line_names_file_and_line(tmp_path):
    """A torn line in an event log raises EventLogError naming the file and the line number."""
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(start(0.0, "A")) + "\n" + '{"v":1,"t":0.5,"no' + "\n")
    with pytest.raises(EventLogError, match=r"events\.jsonl:2: not valid JSON"):
        read_events(path)
    assert issubclass(EventLogError, ValueError)


def test_read_run_without_node_logs_fails(tmp_path):
    """An empty run directory is an error, not a vacuously passing log."""
    with pytest.raises(EventLogError, match="no nodes/"):
        read_run(tmp_path)
