"""Example tests of the event-log checkers (harness.checks) and the log reader (harness.eventlog).

Each test builds a tiny synthetic log with node.events.make_event: a clean two-node transfer A->B,
then one planted defect, and asserts both the verdict and the explanation a person would read.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.checks import CHECKS, CheckResult, run_checks
from harness.eventlog import EventLogError, read_events, read_run, write_events
from node.events import make_event, validate_event

END = 10.0  # when the surviving nodes write their final windows


# ---- event builders ---------------------------------------------------------------------------


def start(t: float, node: str, incarnation: int = 0) -> dict:
    return make_event(t, node, "node", "node_start", incarnation=incarnation)


def stop(t: float, node: str, reason: str = "kill") -> dict:
    return make_event(t, node, "node", "node_stop", reason=reason)


def send(t: float, x: str, y: str, n: int, conn: int = 1, stream: int = 0) -> dict:
    return make_event(t, x, "unicast3", "send", peer=y, seqno=n + 1, conn_id=conn,
                      app=f"{x}:{stream}:{n}")


def deliver(t: float, y: str, x: str, n: int, conn: int = 1, stream: int = 0) -> dict:
    return make_event(t, y, "unicast3", "deliver", peer=x, seqno=n + 1, conn_id=conn,
                      app=f"{x}:{stream}:{n}")


def ack_rx(t: float, x: str, y: str, seqno: int, conn: int = 1) -> dict:
    return make_event(t, x, "unicast3", "ack_rx", peer=y, seqno=seqno, conn_id=conn)


def window(node: str, peer: str, side: str, low: int, high: int, conn: int = 1, t: float = END) -> dict:
    return make_event(t, node, "unicast3", "window", peer=peer, side=side, conn_id=conn,
                      low=low, high=high, state="OPEN", final=True)


def harness_fault(t: float, kind: str, fault: str, detail: str = "A<->B") -> dict:
    return make_event(t, "harness", "harness", kind, fault=fault, detail=detail)


def transfer(x: str, y: str, count: int, t0: float = 1.0, conn: int = 1) -> list[dict]:
    """count messages x->y, each sent, delivered and acked 0.1 s apart."""
    events = []
    for n in range(count):
        t = t0 + n * 0.1
        events += [send(t, x, y, n, conn), deliver(t + 0.01, y, x, n, conn),
                   ack_rx(t + 0.02, x, y, n + 1, conn)]
    return events


def clean_run(count: int = 3) -> list[dict]:
    """A and B up, A sends count messages to B, both report matching final windows."""
    return ([start(0.0, "A"), start(0.0, "B")] + transfer("A", "B", count)
            + [window("A", "B", "send", count, count), window("B", "A", "recv", count, count)])


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
    assert [r.name for r in results] == list(CHECKS)
    assert all(r.passed for r in results), [r.explanation for r in results]


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
        "name": "fifo", "passed": True, "explanation": "3 deliveries in FIFO order",
        "details": {"deliveries": 3, "violations": 0, "first": []},
    }


def test_unsorted_log_is_ordered_by_time():
    """Events given out of time order are checked in time order, not list order."""
    events = clean_run()
    assert all(r.passed for r in run_checks(list(reversed(events))))


# ---- fifo -------------------------------------------------------------------------------------


def test_fifo_reordered_delivery_fails():
    """Reordered delivery: B delivers A:0:2 before A:0:1."""
    events = [start(0.0, "A"), start(0.0, "B"),
              deliver(1.0, "B", "A", 0), deliver(1.5, "B", "A", 2), deliver(2.0, "B", "A", 1)]
    res = result(events, "fifo")
    assert not res.passed
    assert res.explanation == ("receiver B (incarnation 0) delivered A:0:1 after A:0:2 from A "
                               "(conn 1, stream 0) at t=2.000; 1 FIFO violation(s) in total")
    assert res.details["violations"] == 1


def test_fifo_ignores_gaps_duplicates_and_other_streams():
    """Gaps, a repeated n and an interleaved second stream are not FIFO violations."""
    events = [start(0.0, "B"),
              deliver(1.0, "B", "A", 0), deliver(1.1, "B", "A", 5, stream=1),
              deliver(1.2, "B", "A", 3), deliver(1.3, "B", "A", 3), deliver(1.4, "B", "A", 0, stream=1)]
    # Stream 1 goes 5 then 0: that one is a violation, stream 0 (a gap and a duplicate) is not.
    res = result(events, "fifo")
    assert res.details["violations"] == 1
    assert res.details["first"][0]["stream"] == 1


def test_fifo_restarts_with_receiver_incarnation():
    """Receiver restarted: the new incarnation may deliver lower n again without a violation."""
    events = [start(0.0, "B"), deliver(1.0, "B", "A", 4), stop(2.0, "B"), start(3.0, "B", 1),
              deliver(4.0, "B", "A", 2)]
    assert result(events, "fifo").passed


# ---- no_duplicates ----------------------------------------------------------------------------


def test_duplicate_delivery_fails():
    """Duplicate: B delivers A:0:1 twice on the same connection."""
    events = clean_run() + [deliver(5.0, "B", "A", 1)]
    res = result(events, "no_duplicates")
    assert not res.passed
    assert res.explanation == ("receiver B (incarnation 0) delivered A:0:1 from A twice on conn 1, "
                               "at t=1.110 and t=5.000; 1 duplicate delivery(ies) in total")
    assert res.details["duplicates"] == 1


def test_redelivery_under_new_conn_id_is_counted_not_failed():
    """Resync after reset: B delivers A:0:0..1 again under conn 2; counted, not a failure."""
    events = clean_run() + [deliver(6.0, "B", "A", 0, conn=2), deliver(6.1, "B", "A", 1, conn=2)]
    res = result(events, "no_duplicates")
    assert res.passed, res.explanation
    assert res.details["redelivered_after_reset"] == 2
    assert "2 app id(s) redelivered under a new conn_id" in res.explanation


def test_redelivery_by_new_receiver_incarnation_is_no_duplicate():
    """Receiver restarted: its new incarnation delivering the same app id again is not a duplicate."""
    events = [start(0.0, "B"), deliver(1.0, "B", "A", 0), stop(2.0, "B", "crash"),
              start(3.0, "B", 1), deliver(4.0, "B", "A", 0)]
    res = result(events, "no_duplicates")
    assert res.passed
    assert res.details["redelivered_after_reset"] == 0


# ---- no_loss ----------------------------------------------------------------------------------


def test_missing_delivery_fails():
    """Loss: A sends A:0:3 and A:0:4 to B, B never delivers them."""
    events = clean_run() + [send(4.0, "A", "B", 3), send(4.1, "A", "B", 4),
                            start(0.0, "C"), deliver(5.0, "C", "A", 0)]
    res = result(events, "no_loss")
    assert not res.passed
    assert res.explanation == ("2 message(s) lost: A->B: 2 never delivered (first A:0:3 A:0:4; "
                               "last delivery on this link t=1.210); last delivery anywhere t=5.000")
    assert res.details["lost"]["A->B"]["count"] == 2


def test_receiver_killed_at_end_is_not_loss():
    """Receiver B killed and never restarted: undelivered messages to B are not counted as loss."""
    events = clean_run() + [send(4.0, "A", "B", 3), stop(4.5, "B", "kill")]
    res = result(events, "no_loss")
    assert res.passed, res.explanation
    assert res.details["excused"]["dead_at_end"] == 4


def test_sender_restarted_after_send_is_not_loss():
    """Sender A restarted after sending A:0:3: its send window was lost, so A:0:3 is not counted."""
    events = clean_run() + [send(4.0, "A", "B", 3), stop(4.5, "A"), start(5.0, "A", 1)]
    res = result(events, "no_loss")
    assert res.passed, res.explanation
    assert res.details["excused"]["sender_restarted"] == 4


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
    assert res.explanation == ("A->B conn_id mismatch: A send conn 2 HA=3 HS=3, "
                               "B recv conn 1 delivered=3 received=3")


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
    assert res.explanation == "final windows not reported by B (alive at end, with traffic)"
    assert res.details["not_reported"] == ["B"]


def test_dead_node_windows_are_not_checked():
    """B killed at the end: A's out-of-sync window for B and B's missing windows are skipped."""
    events = clean_run()[:-2] + [send(4.0, "A", "B", 3), stop(4.5, "B"),
                                 window("A", "B", "send", 3, 4)]
    res = result(events, "windows_synced")
    assert res.passed, res.explanation
    assert res.details["skipped_dead"] == 1


def test_sync_time_is_measured_from_last_heal():
    """Partition healed at t=5 and t=7; last deliver at 7.5 and last ack at 8.25 give sync_time 1.25."""
    events = (clean_run()[:-2]
              + [harness_fault(2.0, "fault_on", "partition"), harness_fault(5.0, "fault_off", "partition"),
                 harness_fault(6.0, "fault_on", "loss"), harness_fault(7.0, "fault_off", "loss"),
                 send(7.4, "A", "B", 3), deliver(7.5, "B", "A", 3), ack_rx(8.25, "A", "B", 4),
                 window("A", "B", "send", 4, 4), window("B", "A", "recv", 4, 4)])
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
    assert (run / "timeline.jsonl").read_text().splitlines()[0] == json.dumps(
        events[-1], separators=(",", ":"))
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
