"""Run lines (schema version 2, node/events.py): one line for a batch's run of sends or deliveries.

Written by the node's event log and the simulator's run directories, read back and judged by the
checkers as they are, with the verdicts a log of one line per message gets; a run line that
contradicts itself, or runs that overlap or leave a gap, are caught."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from splitbrain.harness.checks import run_checks
from splitbrain.harness.collect import count_messages
from splitbrain.harness.eventlog import EventLogError, read_events, read_run, write_events
from splitbrain.harness.rundir import write_events as write_run_events
from splitbrain.harness.scenario import load_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.node.events import (
    DataEvents,
    compact_runs,
    expand_runs,
    is_run,
    make_event,
    run_event,
    validate_event,
)
from splitbrain.node.message import Message, app_payload, workload_message
from splitbrain.node.runtime.eventlog import EventLog

END = 10.0


def _records() -> list[DataEvents]:
    msgs = [Message("A", "B", app_payload("A", 0, n, 100)) for n in range(5, 15)]
    mixed = [Message("A", "B", app_payload("A", 0, n, 100)) for n in (1, 2, 3, 7, 8, 4)]
    own = [workload_message("A", "*", 1, n, 60) for n in range(3)]
    return [
        DataEvents(1.5, "B", "unicast3", "deliver", "A", 3, 1, msgs),
        DataEvents(1.5, "B", "unicast3", "deliver", "A", 3, 11, mixed),
        DataEvents(2.0, "A", "nakack2", "send", None, None, 1, own, ["A", "B"]),
        DataEvents(2.0, "B", "nakack2", "deliver", "A", None, 7, msgs[:1]),
    ]


def _sorted_by_message(events: list[dict]) -> list[dict]:
    return sorted(events, key=lambda ev: (ev["kind"], ev["seqno"]))


def test_node_log_writes_a_batch_as_one_run_line_that_expands_to_its_messages(tmp_path):
    """A record of consecutive app ids is one line; a broken run is split into its pieces, and
    a lone message stays a version-1 line; expanded, the lines are the record's messages."""
    loop = asyncio.new_event_loop()
    try:
        log = EventLog(tmp_path / "e.jsonl", loop)
        for rec in _records():
            lines = [json.loads(line) for line in log.encode([rec]).decode().splitlines()]
            for ev in lines:
                validate_event(ev)
            assert lines == rec.run_dicts()
            assert _sorted_by_message(expand_runs(lines)) == _sorted_by_message(rec.dicts())
        first, mixed, own, lone = (
            [json.loads(x) for x in log.encode([rec]).decode().splitlines()] for rec in _records()
        )
        assert len(first) == 1 and first[0]["count"] == 10 and first[0]["bytes"] == 1000
        assert [(ev["v"], ev.get("count")) for ev in mixed] == [(2, 3), (2, 2), (1, None)]
        assert [(ev["kind"], ev["count"]) for ev in own] == [("send", 3), ("deliver", 3)]
        assert "members" in own[0] and own[1]["peer"] == "A"
        assert lone[0]["v"] == 1
        log.close()
    finally:
        loop.close()


def test_compact_runs_is_what_the_node_writes_and_expand_runs_undoes_it():
    rec = _records()[0]
    flat = rec.dicts()
    runs = compact_runs(flat)
    assert runs == rec.run_dicts()
    assert expand_runs(runs) == flat
    # Another time, another connection or a skipped app id ends a run.
    moved = [dict(ev) for ev in flat]
    for ev in moved[4:]:
        ev["t"] = 1.6
    moved[7]["app"] = "A:0:99"
    assert [ev.get("count", 1) for ev in compact_runs(moved)] == [4, 3, 1, 2]


def test_run_line_that_contradicts_itself_is_refused_with_its_line(tmp_path):
    """A gap inside a run line (seqnos or app ids that are not `count` messages)."""
    good = run_event(1.0, "B", "unicast3", "deliver", "A", 1, 1, 10, 1000, "A:0:0", "A:0:9")
    validate_event(good)
    gaps = [
        {**good, "last_seqno": 11},  # 11 seqnos for 10 messages
        {**good, "last_app": "A:0:10"},  # 11 app ids for 10 messages
        {**good, "last_app": "A:1:9"},  # two streams
        {**good, "count": 0, "last_seqno": 0},
    ]
    for bad in gaps:
        with pytest.raises(ValueError):
            validate_event(bad)
        path = tmp_path / "nodes" / "B" / "events.jsonl"
        write_events(path, [make_event(0.0, "B", "node", "node_start", incarnation=0), bad])
        with pytest.raises(EventLogError, match=r"events.jsonl:2: bad run line"):
            read_events(path)
        with pytest.raises(ValueError, match="run at B"):
            run_checks([bad], ["fifo"])
    with pytest.raises(ValueError, match="belong to run lines"):
        validate_event({**make_event(1.0, "B", "unicast3", "deliver", peer="A", seqno=1, app="A:0:1"), "last_seqno": 1})


def _run(t: float, kind: str, x: str, y: str, first: int, count: int) -> dict:
    """A run of app n first..first+count-1 of stream 0, x->y: sent at x or delivered at y."""
    node, peer = (x, y) if kind == "send" else (y, x)
    return run_event(
        t,
        node,
        "unicast3",
        kind,
        peer,
        1,
        first + 1,
        count,
        100 * count,
        f"{x}:0:{first}",
        f"{x}:0:{first + count - 1}",
    )


def _window(node: str, peer: str, side: str, high: int) -> dict:
    return make_event(
        END, node, "unicast3", "window", peer=peer, side=side, conn_id=1, low=high, high=high, state="OPEN", final=True
    )


def _log(deliveries: list[dict], sent: int = 300, delivered_high: int = 300) -> list[dict]:
    return [
        make_event(0.0, "A", "node", "node_start", incarnation=0),
        make_event(0.0, "B", "node", "node_start", incarnation=0),
        _run(1.0, "send", "A", "B", 0, 100),
        _run(1.1, "send", "A", "B", 100, 100),
        _run(1.2, "send", "A", "B", 200, sent - 200),
        *deliveries,
        make_event(1.5, "A", "unicast3", "ack_rx", peer="B", seqno=sent, conn_id=1),
        _window("A", "B", "send", sent),
        _window("B", "A", "recv", delivered_high),
    ]


CHECKS = ["fifo", "no_duplicates", "no_loss", "windows_synced", "no_errors"]


def _both(events: list[dict]) -> list:
    """The verdicts of a log with runs; asserted equal to those of its expanded form."""
    runs = [r.to_dict() for r in run_checks(events, CHECKS)]
    assert runs == [r.to_dict() for r in run_checks(expand_runs(events), CHECKS)]
    return runs


def test_runs_judged_as_their_messages_pass_a_clean_transfer():
    verdicts = _both(_log([_run(1.01, "deliver", "A", "B", 0, 150), _run(1.21, "deliver", "A", "B", 150, 150)]))
    assert all(v["passed"] for v in verdicts), verdicts
    assert [v["judged"] for v in verdicts[:3]] == [300, 300, 300]
    assert count_messages(_log([])) == (300, 0)


def test_a_gap_between_runs_is_loss():
    """Deliveries 0..149 and 160..299: the ten in between are lost and named."""
    verdicts = _both(_log([_run(1.01, "deliver", "A", "B", 0, 150), _run(1.21, "deliver", "A", "B", 160, 140)]))
    loss = next(v for v in verdicts if v["name"] == "no_loss")
    assert not loss["passed"]
    assert loss["details"]["lost"]["A->B"]["count"] == 10
    assert loss["details"]["lost"]["A->B"]["first"][:2] == ["A:0:150", "A:0:151"]


def test_a_run_that_overlaps_another_is_a_duplicate_and_out_of_order():
    """Deliveries 0..159 then 150..299: 150..159 twice, 150..158 the second time below 159."""
    verdicts = _both(_log([_run(1.01, "deliver", "A", "B", 0, 160), _run(1.21, "deliver", "A", "B", 150, 150)]))
    by_name = {v["name"]: v for v in verdicts}
    assert not by_name["no_duplicates"]["passed"] and by_name["no_duplicates"]["details"]["duplicates"] == 10
    assert "delivered A:0:150 from A twice" in by_name["no_duplicates"]["explanation"]
    assert not by_name["fifo"]["passed"] and by_name["fifo"]["details"]["violations"] == 9


def test_runs_overlapping_a_lost_stretch_name_the_first_lost_ids():
    """Deliveries 0..99, 150..199 and 120..169 (overlapping the one before): 100..119 lost and
    named in order, 150..169 twice, 120..149 below 199 out of order."""
    verdicts = _both(
        _log(
            [
                _run(1.01, "deliver", "A", "B", 0, 100),
                _run(1.11, "deliver", "A", "B", 150, 50),
                _run(1.15, "deliver", "A", "B", 120, 50),
                _run(1.21, "deliver", "A", "B", 200, 100),
            ]
        )
    )
    by_name = {v["name"]: v for v in verdicts}
    lost = by_name["no_loss"]["details"]["lost"]["A->B"]
    assert lost["count"] == 20 and lost["first"] == [f"A:0:{n}" for n in range(100, 110)]
    assert "A->B: 20 never delivered (first A:0:100 A:0:101" in by_name["no_loss"]["explanation"]
    assert by_name["no_duplicates"]["details"]["duplicates"] == 20
    assert by_name["fifo"]["details"]["violations"] == 50
    assert by_name["fifo"]["details"]["first"][0]["app"] == "A:0:120"


@pytest.mark.parametrize("runs", [10, 1000])
def test_no_loss_keeps_a_few_numbers_per_run_not_an_entry_per_message(runs):
    """A transfer of `runs` run lines of 100 messages each way: no_loss holds one step per run
    line sent and one range per stretch delivered, however many messages they stand for."""
    from splitbrain.harness.checks import CheckContext, NoLoss
    from splitbrain.harness.checks.run import walk

    sends = [_run(1.0 + i * 0.001, "send", "A", "B", 100 * i, 100) for i in range(runs)]
    delivers = [_run(1.0005 + i * 0.001, "deliver", "A", "B", 100 * i, 100) for i in range(runs) if i != runs // 2]
    events = sorted(
        [make_event(0.0, "A", "node", "node_start"), make_event(0.0, "B", "node", "node_start")] + sends + delivers,
        key=lambda ev: ev["t"],
    )
    checker = NoLoss(CheckContext())
    walk(events, [checker])
    steps = [len(s.times) for segments in checker.sent.values() for s in segments]
    assert sum(steps) == runs and len(steps) == 1
    assert [r.ranges() for r in checker.delivered.values()] == [
        ((0, 100 * (runs // 2) - 1), (100 * (runs // 2 + 1), 100 * runs - 1))
    ]
    result = checker.result()
    assert result.details["lost"]["A->B"]["count"] == 100
    assert result.details["lost"]["A->B"]["first"][0] == f"A:0:{100 * (runs // 2)}"


def test_an_old_log_and_its_runs_give_one_verdict_from_a_run_directory(tmp_path):
    """A simulated run whose frames carry several messages (a receiver catching up after a
    pause), written with runs, judges as its in-memory log of one event per message."""
    scenario = dataclasses.replace(load_scenario("scenarios/pause-receiver.yaml"), seed=1)
    result = Simulation(scenario, 1).run()
    write_run_events(tmp_path, result.events, result.timeline)
    written = read_run(tmp_path)
    assert any(is_run(ev) for ev in written)
    names = list(scenario.checks)
    bound = scenario.recovery_bound
    want = [r.to_dict() for r in run_checks(result.all_events(), names, recovery_bound_s=bound)]
    assert [r.to_dict() for r in run_checks(written, names, recovery_bound_s=bound)] == want
    assert count_messages(written) == count_messages(result.all_events())


def test_simulator_logs_with_runs_are_byte_identical_across_runs_of_a_seed(tmp_path):
    scenario = dataclasses.replace(load_scenario("scenarios/pause-receiver.yaml"), seed=2)
    texts = []
    for i in range(2):
        result = Simulation(scenario, 2).run()
        write_run_events(tmp_path / str(i), result.events, result.timeline)
        texts.append(sorted((p.name, p.read_bytes()) for p in (tmp_path / str(i)).glob("nodes/*/events.jsonl")))
    assert texts[0] == texts[1]
    assert b'"v":2' in b"".join(text for _, text in texts[0])


def test_log_command_prints_every_message_of_a_run_on_its_own_line(tmp_path, capsys):
    from splitbrain.harness.cli import main

    events = _log([_run(1.01, "deliver", "A", "B", 0, 150), _run(1.21, "deliver", "A", "B", 150, 150)])
    for node in ("A", "B"):
        write_events(tmp_path / "nodes" / node / "events.jsonl", [ev for ev in events if ev["node"] == node])
    assert main(["log", str(tmp_path), "--node", "B", "--kind", "deliver"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["app"] for line in lines] == [f"A:0:{n}" for n in range(300)]
    assert all(json.loads(line)["v"] == 1 and "count" not in json.loads(line) for line in lines)
    assert main(["log", str(tmp_path)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 600 + 5  # 300 sends, 300 deliveries, 5 others
    assert main(["log", str(tmp_path / "nothing")]) == 2
    assert "no nodes/*/events.jsonl" in capsys.readouterr().err


def test_node_log_checks_every_app_id_of_a_stream_run():
    """The column-by-column check of a workload batch (node/runtime/eventlog.py) accepts exactly
    the batches whose ids are consecutive: any one id changed, two swapped, or another stream's
    id in the middle makes it refuse, and the record is then written piece by piece."""
    import random

    from splitbrain.node.runtime.eventlog import _stream_run
    from splitbrain.node.runtime.workload import make_payloads

    rng = random.Random(7)
    for first, count in [(0, 2), (5, 5), (10, 90), (1000, 1024), (123456, 300), (99_990, 10)]:
        payloads = make_payloads(b"A:0:", first, first + count - 1, 100)
        assert _stream_run(payloads) == (f"A:0:{first}", f"A:0:{first + count - 1}", 100 * count)
        for _ in range(20):
            bad = list(payloads)
            i = rng.randrange(count)
            how = rng.randrange(3)
            if how == 0:  # another n of the same width
                n = first + i
                other = n + rng.choice((-1, 1)) * (10 ** rng.randrange(len(str(n))))
                if len(str(other)) != len(str(n)) or other == n:
                    continue
                bad[i] = make_payloads(b"A:0:", other, other, 100)[0]
            elif how == 1 and count > 1:  # two swapped
                j = (i + 1) % count
                bad[i], bad[j] = bad[j], bad[i]
            else:  # another stream's id
                bad[i] = make_payloads(b"A:1:", first + i, first + i, 100)[0]
            if bad != payloads:
                assert _stream_run(bad) is None, (first, count, i, how)
    # Numbers that gain a digit inside the batch: checked piece by piece, still one run.
    assert _stream_run(make_payloads(b"A:0:", 1, 1024, 100)) == ("A:0:1", "A:0:1024", 102400)
    gained = make_payloads(b"A:0:", 95, 104, 100)
    assert _stream_run(gained) == ("A:0:95", "A:0:104", 1000)
    assert _stream_run(gained[:4] + gained[5:] + gained[4:5]) is None
    assert _stream_run(gained[:5] + make_payloads(b"A:0:", 101, 105, 100)) is None  # 99 -> 101
    assert _stream_run(make_payloads(b"A:0:", 95, 99, 100) + make_payloads(b"A:1:", 100, 104, 100)) is None


def test_retransmissions_and_drops_of_a_batch_are_runs_too(tmp_path):
    """A resent batch and the drops of a window's overflow: one run line each, counted as their
    messages by the checks that count them (resync_traffic, no_errors) and by the evidence."""
    from splitbrain.harness.checks import check_resync_traffic
    from splitbrain.harness.evidence import evidence_lines

    resent = [
        make_event(2.0, "A", "unicast3", "retransmit", peer="B", seqno=s, conn_id=1, bytes=100, reason="sync")
        for s in range(10, 20)
    ]
    dropped = [
        make_event(2.1, "B", "unicast3", "drop", peer="A", seqno=s, conn_id=1, type="DATA", reason="duplicate")
        for s in range(10, 15)
    ] + [make_event(2.1, "B", "unicast3", "drop", peer="A", seqno=16, conn_id=1, type="DATA", reason="duplicate")]
    runs = compact_runs(resent + dropped)
    assert [(ev["kind"], ev.get("count")) for ev in runs] == [("retransmit", 10), ("drop", 5), ("drop", None)]
    assert runs[0]["bytes"] == 1000 and "bytes" not in runs[1] and runs[1]["last_seqno"] == 14
    for ev in runs:
        validate_event(ev)
    assert expand_runs(runs) == resent + dropped
    assert check_resync_traffic(runs, 100).to_dict() == check_resync_traffic(resent + dropped, 100).to_dict()
    assert run_checks(runs, ["no_errors"])[0].judged == 16
    assert evidence_lines(runs) == evidence_lines(resent + dropped)
    # The node's log writes them so.
    loop = asyncio.new_event_loop()
    try:
        log = EventLog(tmp_path / "e.jsonl", loop)
        assert [json.loads(line) for line in log.encode(resent + dropped).decode().splitlines()] == runs
        log.close()
    finally:
        loop.close()


def test_a_redelivery_after_a_discard_is_judged_against_the_latest_send_of_a_run():
    """no_duplicates asks whether the sender had seen a message acked before it came again: the
    send a run line stands for counts, the later of a single send and a run's sending it wins."""
    ack = make_event(1.5, "A", "unicast3", "ack_rx", peer="B", seqno=300, conn_id=1)
    restart = [
        make_event(2.0, "B", "node", "node_stop", reason="kill"),
        make_event(2.1, "B", "node", "node_start", incarnation=1),
    ]
    again = _run(3.0, "deliver", "A", "B", 0, 10)
    events = _log([_run(1.01, "deliver", "A", "B", 0, 300)])
    events = events[:-3] + [ack] + restart + [again] + events[-2:]
    verdict = _both(events)
    dups = next(v for v in verdict if v["name"] == "no_duplicates")
    assert not dups["passed"] and dups["details"]["duplicates"] == 10  # acked before: not excused
    unacked = [ev for ev in events if ev["kind"] != "ack_rx"]
    dups = next(v for v in _both(unacked) if v["name"] == "no_duplicates")
    assert dups["passed"] and dups["details"]["redelivered_by_cause"]["receiver_restarted"] == 10


def _single(t: float, n: int) -> dict:
    return make_event(t, "B", "unicast3", "deliver", peer="A", seqno=n + 1, conn_id=1, bytes=100, app=f"A:0:{n}")


@pytest.mark.parametrize(
    "deliveries",
    [
        # single lines, then a run over two of them
        [_single(1.01 + n / 1000, n) for n in range(5)] + [_run(1.2, "deliver", "A", "B", 3, 297)],
        # a run, then a single line of one of its messages
        [_run(1.01, "deliver", "A", "B", 0, 300), _single(1.3, 5)],
        # two runs with a gap, a run over both and the gap, then a single in the old gap
        [
            _run(1.01, "deliver", "A", "B", 0, 10),
            _run(1.02, "deliver", "A", "B", 20, 10),
            _run(1.03, "deliver", "A", "B", 5, 21),
            _single(1.04, 15),
            _run(1.05, "deliver", "A", "B", 30, 270),
        ],
        # redelivered after a restart (excused when unacked), then once more (a duplicate)
        [
            _run(1.01, "deliver", "A", "B", 0, 300),
            make_event(1.2, "B", "node", "node_stop", reason="kill"),
            make_event(1.3, "B", "node", "node_start", incarnation=1),
            _run(1.31, "deliver", "A", "B", 290, 10),
            _single(1.32, 295),
            _run(1.33, "deliver", "A", "B", 298, 2),
        ],
    ],
)
def test_duplicates_between_runs_and_single_lines_are_those_of_the_expanded_log(deliveries):
    log = [ev for ev in _log(deliveries) if ev["kind"] != "ack_rx"]  # nothing acked: excusable
    dups = next(v for v in _both(log) if v["name"] == "no_duplicates")
    assert not dups["passed"] or dups["details"]["redelivered_after_reset"], dups


def test_a_senders_own_deliveries_in_a_run_line_count_as_loopback():
    """A run line of a sender delivering its own messages counts them as loopback, as its expanded form does."""
    own = run_event(1.02, "A", "unicast3", "deliver", "A", 1, 1, 120, 12000, "A:0:0", "A:0:119")
    events = _log([own, _run(1.01, "deliver", "A", "B", 0, 300)])
    runs = [r.to_dict() for r in run_checks(events, ["fifo", "no_duplicates"])]
    assert runs == [r.to_dict() for r in run_checks(expand_runs(events), ["fifo", "no_duplicates"])]
    assert [r["details"].get("loopback") for r in runs] == [120, 120]
