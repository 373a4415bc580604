"""The Spark pipeline on multicast runs (NAKACK2, MCAST): latency from a multicast's send to its
delivery at each other member, per receiver, equal to a plain-Python computation over the logs;
time blocked per sender; STABLE, ACK and XMIT-REQ per delivered message; the timeline's series per
multicast sender, the same from the Spark query and from the per-run task."""

from __future__ import annotations

import math

import pytest

from splitbrain.harness.eventlog import read_run
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import parse_scenario
from splitbrain.node.events import expand_runs

PERCENTILES = (0.5, 0.9, 0.99)


def _scenario(protocol: str) -> dict:
    """Three members multicasting; C cut off both ways 1.5-3.5 s (MCAST's A and B block)."""
    config = {"xmit_interval": 0.2, "capacity": 100} if protocol == "mcast" else {"xmit_interval": 0.2}
    if protocol == "nakack2":
        config["stable_interval"] = 0.5
    return {
        "name": f"{protocol}-pipeline",
        "protocol": protocol,
        "transport": "udp",
        "nodes": 3,
        "config": config,
        "workload": [
            {"from": "A", "to": "all", "rate": 100, "duration": 4},
            {"from": "B", "to": "all", "rate": 50, "duration": 4},
        ],
        "schedule": [
            {"at": 0.5, "loss": {"link": "*", "p": 0.1}},
            {"at": 1.5, "partition": [["A", "B"], ["C"]]},
            {"at": 3.5, "heal": "all"},
        ],
        "duration": 4,
        "settle": 4,
        "checks": ["fifo", "no_duplicates", "no_loss"],
        "seed": 3,
    }


def _plain_latency(events: list[dict]) -> dict[str, list[float]]:
    """Receiver -> latencies: each multicast send (no peer, members) to its first delivery at
    every other member of the sender's view, straight from the logs."""
    first_delivery: dict[tuple, float] = {}
    for e in events:
        if e["kind"] == "deliver" and "app" in e:
            first_delivery.setdefault((e["node"], e["app"]), e["t"])
    out: dict[str, list[float]] = {}
    for e in events:
        if e["kind"] == "send" and "app" in e and "peer" not in e:
            for member in e["members"]:
                t = first_delivery.get((member, e["app"]))
                if member != e["node"] and t is not None:
                    out.setdefault(member, []).append(t - e["t"])
    return out


def _summary(values: list[float]) -> dict:
    ordered = sorted(values)
    # The exact rank Spark's percentile_approx returns below its accuracy: the smallest value
    # with at least q of the values at or below it.
    pick = {f"p{int(q * 100)}_s": ordered[max(0, math.ceil(q * len(ordered)) - 1)] for q in PERCENTILES}
    return {"n": len(values), "mean_s": sum(values) / len(values), "max_s": ordered[-1], **pick}


def _rounded(x):
    """Floats to 9 significant digits, recursively (sums taken in another order differ in the last bits)."""
    if isinstance(x, float):
        return float(f"{x:.9g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def _close(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=1e-12) for k in a)


@pytest.fixture(scope="module")
def analyzed(spark, tmp_path_factory):
    from splitbrain.pipeline import analysis as A

    runs = tmp_path_factory.mktemp("runs")
    outcomes = {}
    for protocol in ("mcast", "nakack2"):
        outcome = run_scenario(parse_scenario(_scenario(protocol)), backend="sim", out=runs)
        assert outcome.verdict.passed, protocol
        outcomes[protocol] = outcome
    analysis = A.analyze(spark, [str(runs)], str(tmp_path_factory.mktemp("warehouse")))
    verdicts = {v.run_id: v for v in analysis.verdicts}
    return {
        p: (o.run_dir, expand_runs(read_run(o.run_dir)), verdicts[o.run_dir.name]) for p, o in outcomes.items()
    }, analysis


@pytest.mark.parametrize("protocol", ["mcast", "nakack2"])
def test_multicast_latency_per_receiver_is_the_plain_python_one(analyzed, protocol):
    """Per receiver and over the run: n, mean, max and percentiles of send -> delivery at each
    other member equal a plain computation over the event logs (the sender's own delivery left out)."""
    runs, _ = analyzed
    _run_dir, events, v = runs[protocol]
    plain = _plain_latency(events)
    assert set(plain) == {"A", "B", "C"} and len(plain["C"]) > 100
    got = v.metrics["latency_by_receiver"]
    assert set(got) == set(plain)
    for receiver, values in plain.items():
        assert _close(got[receiver], _summary(values)), receiver
    assert _close(v.metrics["latency"], _summary([x for values in plain.values() for x in values]))
    # C was cut off 1.5-3.5 s: its tail is the partition's length, A's and B's are not.
    assert got["C"]["max_s"] > 1.5 > got["A"]["max_s"]


def test_metrics_from_the_dataframe_queries_equal_the_tasks_on_multicast_runs(analyzed, spark):
    """The DataFrame queries (pipeline.checks, pipeline.metrics) give the same metrics as the
    per-run tasks on these multicast runs: latency per receiver and time blocked per node included."""
    from splitbrain.pipeline import analysis as A
    from splitbrain.pipeline import metrics as M
    from splitbrain.pipeline import verdicts as V
    from splitbrain.pipeline.ingest import load_events

    runs, analysis = analyzed
    by_run = V.group_rows(A.collect_rows(load_events(spark, analysis.warehouse)))
    for _run_dir, _events, v in runs.values():
        assert _rounded(M.run_metrics(by_run[v.run_id])) == _rounded(v.metrics), v.run_id


def test_time_blocked_per_sender_and_control_messages_per_delivery(analyzed):
    """MCAST: A and B blocked while C was cut off, per node as the block..unblock spans of the logs
    say; ACK and XMIT-REQ per delivered message. NAKACK2: STABLE per delivered message."""
    runs, _ = analyzed
    _d, events, v = runs["mcast"]
    spans: dict[str, float] = {}
    since: dict[str, float] = {}
    for e in events:
        if e["kind"] == "block":
            since[e["node"]] = e["t"]
        elif e["kind"] == "unblock":
            spans[e["node"]] = spans.get(e["node"], 0.0) + e["t"] - since.pop(e["node"])
    by_node = v.metrics["blocked"]["by_node"]
    assert set(by_node) == {"A", "B"} == set(spans)
    assert all(by_node[n]["seconds"] == pytest.approx(spans[n]) for n in spans)
    delivered = sum(1 for e in events if e["kind"] == "deliver" and "app" in e)
    for key, kind in (("acks", "ack_tx"), ("xmit_reqs", "xmit_req_tx")):
        sent = sum(1 for e in events if e["kind"] == kind)
        assert sent > 0 and v.metrics["overhead"][key]["per_delivered"] == pytest.approx(sent / delivered), key
    _d, events, v = runs["nakack2"]
    stables = sum(1 for e in events if e["kind"] == "stable_tx")
    delivered = sum(1 for e in events if e["kind"] == "deliver" and "app" in e)
    assert stables > 0 and v.metrics["overhead"]["stables"]["per_delivered"] == pytest.approx(stables / delivered)


def test_timeline_series_per_multicast_sender_from_spark_and_from_the_task(analyzed, spark):
    """Per sender: the highest seqno multicast and each receiver's highest delivered per bin, from
    the Spark query and from the per-run task alike; every receiver ends at the sender's last
    seqno; MCAST's window_fill gauges reach the rare events."""
    from splitbrain.pipeline import runwise as R
    from splitbrain.pipeline import timeline as TL
    from splitbrain.pipeline.ingest import load_events

    runs, analysis = analyzed
    events_df = load_events(spark, analysis.warehouse)
    for protocol, (run_dir, events, v) in runs.items():
        files = [(str(p.relative_to(run_dir)), p.read_text()) for p in sorted(run_dir.glob("nodes/*/events.jsonl"))]
        files.append(("timeline.jsonl", (run_dir / "timeline.jsonl").read_text()))
        ordered = R.order(R.classify_files(files)[0])
        from_task = TL.timeline_from_doc(v.run_id, TL.timeline_of(ordered))
        from_spark = TL.timeline_data(events_df, [v.run_id])[v.run_id]
        assert from_spark.senders == from_task.senders, protocol
        # The rare events (the layers' views among them) are the same rows either way.
        assert any(e["kind"] == "view" for e in from_task.rare), protocol
        assert _without_nulls(from_spark.rare) == _without_nulls(from_task.rare), protocol
        assert set(from_task.senders) == {"A", "B"}
        for sender, series in from_task.senders.items():
            last = max(e["seqno"] for e in events if e["node"] == sender and e["kind"] == "send" and "peer" not in e)
            assert series.sent[-1][1] == last
            assert {r: values[-1][1] for r, values in series.delivered.items()} == {"A": last, "B": last, "C": last}
        fills = [e for e in from_task.rare if e["kind"] == "window_fill"]
        assert bool(fills) == (protocol == "mcast")


def _without_nulls(rare: list[dict]) -> list[dict]:
    """Rare events without their null fields (a row read from the warehouse has every column)."""
    return [{k: v for k, v in e.items() if v is not None and k != "run_id"} for e in rare]
