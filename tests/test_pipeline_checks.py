"""Pipeline checks on synthetic logs: planted defects give exactly the expected finding, and the
Spark verdicts equal harness.checks.run_checks field by field, on planted and on random logs.

All synthetic runs of this module are written once, ingested once and judged in one Spark pass
(the `judged` fixture); each test then looks at its own run.
"""

from __future__ import annotations

import json
import random

import pytest

from harness.checks import CHECKS as HARNESS_CHECKS
from harness.checks import run_checks
from harness.eventlog import read_run, write_events
from node.events import make_event
from pipeline.schema import classify_line

END = 10.0
CHECKS = list(HARNESS_CHECKS)  # a run without scenario.yaml is judged by every check


# ---- event builders ---------------------------------------------------------------------------


def start(t, node, incarnation=0):
    return make_event(t, node, "node", "node_start", incarnation=incarnation)


def stop(t, node, reason="kill"):
    return make_event(t, node, "node", "node_stop", reason=reason)


def send(t, x, y, n, conn=1, stream=0):
    return make_event(t, x, "unicast3", "send", peer=y, seqno=n + 1, conn_id=conn, app=f"{x}:{stream}:{n}", bytes=100)


def deliver(t, y, x, n, conn=1, stream=0):
    return make_event(t, y, "unicast3", "deliver", peer=x, seqno=n + 1, conn_id=conn, app=f"{x}:{stream}:{n}",
                      bytes=100)


def ack_rx(t, x, y, seqno, conn=1):
    return make_event(t, x, "unicast3", "ack_rx", peer=y, seqno=seqno, conn_id=conn)


def window(node, peer, side, low, high, conn=1, t=END):
    return make_event(t, node, "unicast3", "window", peer=peer, side=side, conn_id=conn, low=low, high=high,
                      state="OPEN", final=True)


def new_window(t, node, peer, conn=1, low=0):
    return make_event(t, node, "unicast3", "conn_state", peer=peer, side="recv", state="OPEN", conn_id=conn,
                      low=low, reason="new_window:first")


def retransmit(t, x, y, seqno, conn=1):
    return make_event(t, x, "unicast3", "retransmit", peer=y, seqno=seqno, conn_id=conn, reason="xmit_req")


def fault(t, kind, name, detail="#0 partition A -> B (one-way)"):
    return make_event(t, "harness", "harness", kind, fault=name, detail=detail)


def clean(count=5, deliver_order=None, extra=()):
    """A and B up, A sends count messages to B (delivered in deliver_order), windows in sync."""
    order = list(range(count)) if deliver_order is None else deliver_order
    evs = [start(0.0, "A"), start(0.0, "B"), new_window(0.5, "B", "A")]
    for n in range(count):
        evs.append(send(1.0 + n * 0.1, "A", "B", n))
    for i, n in enumerate(order):
        evs.append(deliver(1.05 + i * 0.1, "B", "A", n))
    evs += [ack_rx(1.0 + count * 0.1, "A", "B", count), window("A", "B", "send", count, count),
            window("B", "A", "recv", count, count)]
    return evs + list(extra)


def write_run(root, name, events, raw_lines=None, scenario=None):
    """A run directory: nodes/<node>/events.jsonl per node, timeline.jsonl for the harness;
    raw_lines: {node: [text, ...]} appended verbatim to that node's log (malformed lines)."""
    run = root / name
    by_node: dict[str, list] = {}
    for ev in events:
        by_node.setdefault(ev["node"], []).append(ev)
    for node, evs in by_node.items():
        path = run / "timeline.jsonl" if node == "harness" else run / "nodes" / node / "events.jsonl"
        write_events(path, evs)
    for node, lines in (raw_lines or {}).items():
        path = run / "nodes" / node / "events.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines))  # the last one without a newline, like a torn write
    if scenario is not None:
        (run / "scenario.yaml").write_text(scenario, encoding="utf-8")
    return run


def valid_events(run_dir):
    """The events of a run directory that the pipeline's schema accepts, merged like read_run."""
    files = sorted(run_dir.glob("nodes/*/events.jsonl"), key=lambda p: p.parent.name)
    if (run_dir / "timeline.jsonl").exists():
        files.append(run_dir / "timeline.jsonl")
    events = []
    for path in files:
        with path.open(encoding="utf-8") as src:
            for line in src:
                ev, _reason = classify_line(line.rstrip("\n"))
                if ev is not None:
                    events.append(ev)
    events.sort(key=lambda ev: ev["t"])
    return events


def python_checks(run_dir, names=CHECKS):
    return [c.to_dict() for c in run_checks(valid_events(run_dir), names)]


# ---- the planted defects ----------------------------------------------------------------------

PLANTED = {
    "clean": dict(events=clean()),
    # B delivers A:0:3 before A:0:2.
    "reordered": dict(events=clean(deliver_order=[0, 1, 3, 2, 4])),
    # B delivers A:0:2 twice on one connection.
    "duplicate": dict(events=clean(deliver_order=[0, 1, 2, 2, 3, 4])),
    # B never delivers A:0:3, yet its window claims 5 (a protocol that lost it silently).
    "missing": dict(events=clean(deliver_order=[0, 1, 2, 4])),
    # Acks stop at 3: A's send window never catches up with B's receive window.
    "never_synced": dict(events=[e for e in clean() if e["kind"] not in ("ack_rx", "window")]
                         + [ack_rx(1.3, "A", "B", 3), window("A", "B", "send", 3, 5), window("B", "A", "recv", 5, 5)]),
    # A SIGKILLed node's torn last line, and one line that is not JSON at all.
    "malformed": dict(events=clean(), raw={"B": ['this is not json', '{"v":1,"t":9.9,"node":"B","pro']}),
    # A keeps retransmitting to B for 6 s after the heal and B never delivers again.
    "stuck": dict(events=clean(count=3) + [send(2.0, "A", "B", 3), fault(1.5, "fault_off", "partition")]
                  + [retransmit(2.5 + 0.3 * i, "A", "B", 4) for i in range(20)]
                  + [window("A", "B", "send", 3, 4, t=END + 0.1)]),
}


@pytest.fixture(scope="module")
def judged(spark, tmp_path_factory):
    """Every synthetic run of this module, ingested and judged by one Spark pass."""
    from pipeline import analysis as A

    root = tmp_path_factory.mktemp("synthetic-runs")
    for name, spec in PLANTED.items():
        write_run(root, name, spec["events"], spec.get("raw"))
    for i in range(N_RANDOM):
        write_run(root, f"random-{i:03d}", random_log(random.Random(1000 + i)))
    analysis = A.analyze(spark, [str(root)], str(tmp_path_factory.mktemp("warehouse")))
    return root, {v.run_id: v for v in analysis.verdicts}, analysis


def _failed(verdict):
    return sorted(c["name"] for c in verdict.checks if not c["passed"])


def _check(verdict, name):
    return next(c for c in verdict.checks if c["name"] == name)


def test_clean_run_passes_everything(judged):
    """Clean transfer A->B: every check and the advisory pass, nothing quarantined."""
    root, verdicts, _ = judged
    v = verdicts["clean"]
    assert v.outcome == "passed" and _failed(v) == [] and v.quarantined == 0
    assert all(a["passed"] for a in v.advisory)
    assert v.checks == python_checks(root / "clean")


def test_reordered_delivery_is_one_fifo_violation(judged):
    """Reordered delivery: fifo fails with exactly one violation, A:0:2 after A:0:3."""
    root, verdicts, _ = judged
    v = verdicts["reordered"]
    assert _failed(v) == ["fifo"]
    fifo = _check(v, "fifo")
    assert fifo["details"]["violations"] == 1
    assert fifo["details"]["first"][0]["app"] == "A:0:2" and fifo["details"]["first"][0]["after"] == "A:0:3"
    assert fifo["explanation"].startswith("receiver B (incarnation 0) delivered A:0:2 after A:0:3 from A")
    assert v.checks == python_checks(root / "reordered")


def test_duplicate_delivery_is_one_duplicate(judged):
    """Duplicate: no_duplicates fails with one duplicate of A:0:2; fifo does not report it."""
    root, verdicts, _ = judged
    v = verdicts["duplicate"]
    assert _failed(v) == ["no_duplicates"]
    dup = _check(v, "no_duplicates")
    assert dup["details"]["duplicates"] == 1 and dup["details"]["first"][0]["app"] == "A:0:2"
    assert v.checks == python_checks(root / "duplicate")


def test_missing_delivery_is_one_lost_message(judged):
    """Missing delivery: no_loss fails with exactly A:0:3 lost on A->B."""
    root, verdicts, _ = judged
    v = verdicts["missing"]
    assert _failed(v) == ["no_loss"]
    lost = _check(v, "no_loss")["details"]["lost"]
    assert lost == {"A->B": {"count": 1, "first": ["A:0:3"], "last_deliver_t": pytest.approx(1.35)}}
    assert v.checks == python_checks(root / "missing")


def test_never_synced_window_fails_windows_synced(judged):
    """Never-synced window: windows_synced fails for A->B (HA=3, HS=5) and nothing else does."""
    root, verdicts, _ = judged
    v = verdicts["never_synced"]
    assert _failed(v) == ["windows_synced"]
    ws = _check(v, "windows_synced")
    assert ws["explanation"] == ("A->B A send conn 1 HA=3 HS=5, B recv conn 1 delivered=5 received=5")
    assert ws["details"]["out_of_sync"] == 1
    assert v.checks == python_checks(root / "never_synced")


def test_malformed_lines_are_quarantined_not_fatal(judged, spark):
    """Malformed lines (one not JSON, one torn by SIGKILL): two quarantined rows with reason, file
    and line; the run is still judged on its other events and passes."""
    from pipeline.ingest import load_quarantine

    root, verdicts, analysis = judged
    v = verdicts["malformed"]
    assert v.quarantined == 2 and v.outcome == "passed"
    rows = load_quarantine(spark, analysis.warehouse, ["malformed"]).orderBy("line").collect()
    n_b = sum(1 for e in PLANTED["malformed"]["events"] if e["node"] == "B")
    assert [(r["src"], r["line"], r["reason"]) for r in rows] == [
        ("nodes/B/events.jsonl", n_b + 1, "not a single flat JSON object"),
        ("nodes/B/events.jsonl", n_b + 2, "not a single flat JSON object"),
    ]
    assert rows[1]["raw"] == '{"v":1,"t":9.9,"node":"B","pro'
    assert v.checks == python_checks(root / "malformed")


def test_stuck_retransmission_is_flagged(judged):
    """Stuck retransmission: 20 retransmits over 5.7 s after the heal with no delivery: the
    advisory check fails for A->B (no_loss finds the message, windows_synced the open window)."""
    root, verdicts, _ = judged
    v = verdicts["stuck"]
    stuck = v.advisory[0]
    assert stuck["name"] == "stuck_retransmission" and not stuck["passed"]
    assert [s["link"] for s in stuck["details"]["stuck"]] == ["A->B"]
    assert stuck["details"]["stuck"][0]["retransmits"] == 20
    assert _failed(v) == ["no_loss", "windows_synced"]
    assert v.checks == python_checks(root / "stuck")
    assert all(a["passed"] for a in verdicts["clean"].advisory)


# ---- random logs: the Spark checks are the Python checks --------------------------------------

N_RANDOM = 60
NODES = ("A", "B", "C")


def random_log(rng: random.Random) -> list[dict]:
    """An event soup that exercises every rule of harness.checks: restarts with and without an
    incarnation field, kills and graceful stops, receive windows opened, re-keyed, closed (for
    real or replaced), send windows created, faults cutting links, errors, conn_ids (some missing),
    deliveries without or with an empty peer, repeated and reordered deliveries, final windows
    that match or not, heals, and many events at equal times in different files."""
    evs = []
    t = 0.0
    apps = {(x, y): 0 for x in NODES for y in NODES if x != y}
    sent: list[tuple[str, str, int, int]] = []
    for node in NODES:
        if rng.random() < 0.9:
            evs.append(make_event(0.0, node, "node", "node_start",
                                  **({"incarnation": 0} if rng.random() < 0.7 else {})))
    for _ in range(rng.randint(20, 120)):
        t = round(t + rng.choice((0.0, 0.0, 0.1, 0.2, 0.5)), 1)  # many ties
        r = rng.random()
        x, y = rng.sample(NODES, 2)
        conn = rng.choice((1, 1, 1, 2, None))
        stream = rng.choice((0, 0, 1))
        if r < 0.3:
            n = apps[(x, y)]
            apps[(x, y)] += 1
            sent.append((x, y, n, stream))
            evs.append(make_event(t, x, "unicast3", "send", peer=y, seqno=n + 1, conn_id=conn,
                                  app=f"{x}:{stream}:{n}", bytes=100))
        elif r < 0.6 and sent:
            sx, sy, n, st = rng.choice(sent[-8:])
            peer = rng.choice((sx, sx, sx, None, ""))
            fields = {"peer": peer} if peer is not None else {}
            evs.append(make_event(t, sy, "unicast3", "deliver", seqno=n + 1, conn_id=conn,
                                  app=f"{sx}:{st}:{n}", **fields))
        elif r < 0.66:
            state, reason = rng.choice((("OPEN", "new_window:first"), ("OPEN", "sync: re-keyed"),
                                        ("CLOSED", "close_rx"), ("CLOSED", "close_timeout"), ("CLOSED", "replaced")))
            evs.append(make_event(t, y, "unicast3", "conn_state", peer=x, side="recv", state=state,
                                  conn_id=conn, reason=reason))
        elif r < 0.68:
            evs.append(make_event(t, x, "unicast3", "conn_state", peer=y, side="send", state="OPEN",
                                  conn_id=conn, reason="created"))
        elif r < 0.69:
            evs.append(make_event(t, x, "unicast3", "error", reason="KeyError: 3", detail="protocol.py:1 f: x"))
        elif r < 0.72:
            evs.append(make_event(t, x, "unicast3", "ack_rx", peer=y, seqno=rng.randint(0, 5), conn_id=conn))
        elif r < 0.76:
            kind = rng.choice(("node_start", "node_stop"))
            fields = {}
            if kind == "node_start" and rng.random() < 0.5:
                fields["incarnation"] = rng.randint(0, 3)
            if kind == "node_stop":
                fields["reason"] = rng.choice(("kill", "stop", "restart"))
            evs.append(make_event(t, x, "node", kind, **fields))
        elif r < 0.8:
            links = rng.choice((None, [f"{x}->{y}"], [f"{x}->{y}", f"{y}->{x}"]))
            evs.append(make_event(t, "harness", "harness", rng.choice(("fault_on", "fault_off")),
                                  fault=rng.choice(("partition", "heal", "loss")), detail="#0 x", links=links))
        elif r < 0.86:
            evs.append(make_event(t, x, "unicast3", "retransmit", peer=y, seqno=rng.randint(1, 5), conn_id=conn))
        elif r < 0.9:
            evs.append(make_event(t, x, "unicast3", "ack_tx", peer=y, seqno=1, conn_id=conn))
        else:
            low = rng.randint(0, 4)
            evs.append(make_event(t, x, "unicast3", "window", peer=y, side=rng.choice(("send", "recv")),
                                  conn_id=rng.choice((1, 2, None)), low=low, high=low + rng.choice((0, 0, 1)),
                                  state="OPEN", final=rng.random() < 0.9))
    # Lines out of time order within a file are sorted by t (stably), like read_run does.
    if rng.random() < 0.3:
        rng.shuffle(evs)
    return evs


def test_random_logs_agree_with_the_python_checkers(judged):
    """60 random event soups: every check's result dict (passed, explanation, details) equals
    harness.checks.run_checks on the same events."""
    root, verdicts, _ = judged
    mismatches = []
    for i in range(N_RANDOM):
        name = f"random-{i:03d}"
        expected = [c.to_dict() for c in run_checks(read_run(root / name), CHECKS)]
        if verdicts[name].checks != expected:
            mismatches.append((name, json.dumps(expected)[:600], json.dumps(verdicts[name].checks)[:600]))
    assert not mismatches, mismatches[:2]
    # The soups are varied enough to make every check fail somewhere.
    failing = {c["name"] for v in verdicts.values() for c in v.checks if not c["passed"]}
    assert failing == set(CHECKS)
