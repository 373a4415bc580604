"""The HTML report and its PNGs, drawn from hand-made verdicts and timelines (no Spark)."""

from __future__ import annotations

import struct

import pytest

from splitbrain.pipeline.report import CAMPAIGN_MIN_RUNS, timeline_runs, write_report
from splitbrain.pipeline.timeline import LinkSeries, RunTimeline
from splitbrain.pipeline.verdicts import RunVerdict


def _verdict(run_id, scenario, outcome="passed", lost=0, stuck=False):
    checks = [
        {"name": "fifo", "passed": True, "explanation": "10 deliveries in FIFO order", "details": {}},
        {
            "name": "no_loss",
            "passed": not lost,
            "explanation": f"{lost} message(s) lost: A->B: ..." if lost else "all 10 checked messages delivered",
            "details": {"lost": {"A->B": {"count": lost, "first": ["A:0:3"], "last_deliver_t": 2.0}} if lost else {}},
        },
    ]
    advisory = [
        {
            "name": "stuck_retransmission",
            "passed": not stuck,
            "explanation": "stuck" if stuck else "ok",
            "details": {"stuck": [{"link": "A->B"}] if stuck else []},
        }
    ]
    metrics = {
        "events": 40,
        "delivered": 10,
        "latency": {"n": 10, "p50_s": 0.01, "p90_s": 0.02, "p99_s": 0.05, "max_s": 0.06, "mean_s": 0.012},
        "latency_hist": [(-20, 6), (-17, 4)],
        "overhead": {
            k: {"messages": 1, "per_delivered": 0.1}
            for k in ("acks", "xmit_reqs", "retransmits", "syncs", "first_seqno", "closes", "data")
        },
        "heals": [{"t": 5.0, "links": {}, "sync_s": 0.4, "never_synced": []}],
    }
    return RunVerdict(
        run_id=run_id,
        outcome=outcome,
        expect="pass",
        checks=checks,
        advisory=advisory,
        meta={"scenario": scenario, "seed": 1, "backend": "sim"},
        metrics=metrics,
    )


def _timeline(run_id):
    link = LinkSeries(
        sent=[(t / 10, t) for t in range(1, 60)],
        delivered=[(t / 10 + 0.01, t) for t in range(1, 40)],
        acked=[(t / 10 + 0.02, t) for t in range(1, 40, 5)],
        retransmitted=[(4.5, 40), (5.0, 40)],
        xmit_reqs=[(4.6, 1)],
        lost=[(4.0, 40, "A:0:39")],
        again=[(3.0, 30, "A:0:29")],
    )
    rare = [
        {"t": 2.0, "node": "harness", "kind": "fault_on", "fault": "partition", "detail": "#0 partition A -> B"},
        {
            "t": 3.5,
            "node": "harness",
            "kind": "fault_off",
            "fault": "partition",
            "detail": "#0 partition A -> B (by #1 heal)",
        },
        {"t": 3.0, "node": "B", "kind": "node_stop", "reason": "kill"},
        {"t": 3.2, "node": "B", "kind": "node_start"},
        {"t": 3.6, "node": "B", "kind": "sync_tx", "peer": "A", "phase": "sync"},
        {
            "t": 3.6,
            "node": "B",
            "kind": "conn_state",
            "peer": "A",
            "side": "recv",
            "reason": "new_window:sync",
            "low": 30,
            "conn_id": 7,
        },
        {
            "t": 6.0,
            "node": "A",
            "kind": "window",
            "peer": "B",
            "side": "send",
            "final": True,
            "low": 39,
            "high": 59,
            "conn_id": 7,
        },
        {
            "t": 6.0,
            "node": "B",
            "kind": "window",
            "peer": "A",
            "side": "recv",
            "final": True,
            "low": 39,
            "high": 39,
            "conn_id": 7,
        },
    ]
    return RunTimeline(run_id=run_id, end_t=6.0, links={("A", "B"): link}, rare=rare)


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_report_of_a_few_runs_leads_with_verdicts_and_timelines(tmp_path):
    """Fewer runs than a campaign: each run's verdict table with every check's explanation, then
    the timelines, the matrix and the latency distribution; no pass-rate bars, scatters or box
    plots of one value each."""
    verdicts = [_verdict("r-ok", "steady"), _verdict("r-bad", "split", "failed", lost=1, stuck=True)]
    page = write_report(tmp_path, verdicts, {"runs": 2, "by_scenario": []}, {"r-bad": _timeline("r-bad")}, title="t")
    text = page.read_text()
    assert text.index("<h2>Verdict: r-ok") < text.index("<h2>Verdict: r-bad") < text.index("<h2>Timelines")
    assert text.index("<h2>Timelines") < text.index("<h2>Pass/fail matrix") < text.index("<h2>Runs")
    assert "1 message(s) lost" in text[: text.index("<h2>Timelines")]  # the evidence, before the plots
    for name in ("matrix.png", "latency.png", "timeline-r-bad.png"):
        assert f"img/{name}" in text
    for name in ("pass_rates.png", "overhead.png", "heal_sync.png"):
        assert f"img/{name}" not in text
    one = write_report(tmp_path / "one", verdicts[:1], {}, {}, title="one").read_text()
    assert "matrix.png" not in one and "<h2>Verdict: r-ok" in one


@pytest.mark.slow
def test_report_for_a_small_analysis(tmp_path):
    """A campaign: matrix per run, pass rates, latency, overhead, heal-to-sync and one timeline
    per failing run, all linked from index.html; verdicts.json holds every verdict."""
    verdicts = [_verdict("r-ok", "steady"), _verdict("r-bad", "split", "failed", lost=1, stuck=True)]
    verdicts += [_verdict(f"r-ok{i}", "steady") for i in range(CAMPAIGN_MIN_RUNS - 2)]
    summary = {
        "runs": 2,
        "passed": 1,
        "by_scenario": [
            {"scenario": "split", "runs": 1, "passed": 0, "pass_rate": 0.0},
            {"scenario": "steady", "runs": 1, "passed": 1, "pass_rate": 1.0},
        ],
        "by_protocol": [{"protocol": "unicast3", "runs": 2, "passed": 1, "pass_rate": 0.5}],
        "by_variant": [{"variant": "unicast3 resync=sync", "runs": 2, "passed": 1, "pass_rate": 0.5}],
        "by_fault_type": [{"fault_type": "none", "runs": 1, "passed": 1, "pass_rate": 1.0}],
    }
    chosen = timeline_runs(verdicts)
    assert chosen[0] == "r-bad"
    page = write_report(
        tmp_path,
        verdicts,
        summary,
        {"r-bad": _timeline("r-bad")},
        title="t",
        quarantine=[
            {
                "run_id": "r-bad",
                "src": "nodes/B/events.jsonl",
                "line": 7,
                "reason": "not a single flat JSON object",
                "raw": "{",
            }
        ],
    )
    text = page.read_text()
    for name in ("matrix.png", "pass_rates.png", "latency.png", "overhead.png", "heal_sync.png", "timeline-r-bad.png"):
        assert f"img/{name}" in text
        width, height = _png_size(tmp_path / "img" / name)
        assert width > 400 and height > 150
    assert "not a single flat JSON object" in text and "r-ok" in text
    assert (tmp_path / "verdicts.json").exists()
    # Pass rates per protocol variant, named as such (no "resync" column for every protocol).
    assert "<th>variant</th>" in text and "unicast3 resync=sync" in text and "<th>resync</th>" not in text


def test_big_campaign_matrix_is_per_scenario(tmp_path):
    """More runs than fit in a matrix: one row per scenario with failing/judged counts."""
    verdicts = [
        _verdict(f"r{i}", f"s{i % 3}", "failed" if i % 7 == 0 else "passed", lost=int(i % 7 == 0)) for i in range(100)
    ]
    page = write_report(tmp_path, verdicts, {}, {}, title="big")
    width, height = _png_size(tmp_path / "img" / "matrix.png")
    assert height < 600  # three scenario rows, not a hundred run rows
    assert "100</b> run(s)" in page.read_text()


def test_a_vacuous_run_is_neither_passed_nor_failed_in_the_report(tmp_path):
    """A run whose no_loss judged nothing: counted as vacuous, its check shown in the vacuous colour."""
    v = _verdict("r-empty", "steady", "vacuous")
    v.checks[1] = {
        "name": "no_loss",
        "passed": False,
        "vacuous": True,
        "judged": 0,
        "explanation": "judged nothing: no message with an application id was sent",
        "details": {},
    }
    text = write_report(tmp_path, [v, _verdict("r-ok", "steady")], {}, {}, title="t").read_text()
    assert "1 passed</span>, <span class='failed'>0 failed</span>, <span class='vacuous'>1 vacuous</span>" in text
    assert "<span class='vacuous'>no_loss</span>: judged nothing" in text


def test_big_campaign_matrix_counts_vacuous_checks_apart(tmp_path):
    """Per-scenario cells: a check that judged nothing is not counted as a failure (nor as judged)."""
    from splitbrain.pipeline.report.campaign_figures import plot_matrix

    empty = _verdict("r-empty", "steady", "vacuous")
    empty.checks[1] = {
        "name": "no_loss",
        "passed": False,
        "vacuous": True,
        "judged": 0,
        "explanation": "judged nothing: no message with an application id was sent",
        "details": {},
    }
    texts = []

    import matplotlib.axes

    real_text = matplotlib.axes.Axes.text

    def spy(self, x, y, s, *args, **kwargs):
        texts.append(s)
        return real_text(self, x, y, s, *args, **kwargs)

    verdicts = [_verdict(f"r{i}", "steady") for i in range(60)] + [empty] * 3
    matplotlib.axes.Axes.text = spy
    try:
        plot_matrix(verdicts, tmp_path / "matrix.png")
    finally:
        matplotlib.axes.Axes.text = real_text
    assert "0/60 +3 nothing" in texts  # no_loss and the outcome: 60 judged, none failing
    assert texts.count("0/63") == 2  # fifo and the advisory check judged every run


def test_runs_table_has_the_origin_and_the_timeline_shows_scenario_time():
    """A live run's event clock starts before the scenario: the runs table keeps verdict.json's
    origin_t (0 on the simulator) and the timeline labels both clocks."""
    import json

    import matplotlib.pyplot as plt

    from splitbrain.pipeline.ingest import RunSource
    from splitbrain.pipeline.report.run_figures import time_axes
    from splitbrain.pipeline.runmeta import run_metadata

    run = RunSource(run_id="r", uri="file:/r", event_files=())
    live = json.dumps({"outcome": "passed", "backend": "local", "stats": {"origin_t": 0.35}})
    sim = json.dumps({"outcome": "passed", "backend": "sim", "stats": {}})
    assert run_metadata(run, None, live, "now")["origin_t"] == 0.35
    assert run_metadata(run, None, sim, "now")["origin_t"] == 0.0
    assert run_metadata(run, None, None, "now")["origin_t"] is None
    fig, axes = plt.subplots(2, 1, sharex=True)
    axes = list(axes)
    time_axes(axes, 0.35)
    assert axes[-1].get_xlabel() == "run clock (s); scenario time 0 = run clock 0.35 s"
    assert any(getattr(child, "get_xlabel", lambda: "")() == "scenario time (s)" for child in axes[0].child_axes)
    plt.close(fig)


def _gms_timeline(run_id):
    """A one-way partition A->B with gms: B and C drop A (suspect), A keeps everyone, a merge at
    the heal gives everyone view 5 coordinated by A."""
    tl = _timeline(run_id)
    view = lambda t, node, vid, members, reason: {  # noqa: E731
        "t": t,
        "node": node,
        "kind": "view",
        "view_id": vid,
        "members": list(members),
        "coord": members[0],
        "reason": reason,
    }
    tl.rare = sorted(
        tl.rare
        + [view(0.5, n, 3, "ABC", "join") for n in "ABC"]
        + [
            {"t": 2.4, "node": "B", "kind": "suspect", "peer": "A"},
            {"t": 2.4, "node": "C", "kind": "suspect", "peer": "A"},
            view(2.6, "B", 4, "BC", "suspect"),
            view(2.6, "C", 4, "BC", "suspect"),
            {"t": 4.0, "node": "A", "kind": "merge", "phase": "start", "members": ["A", "B", "C"], "coord": "A"},
            view(4.2, "A", 5, "ABC", "merge"),
            view(4.2, "B", 5, "ABC", "merge"),
            view(4.3, "C", 5, "ABC", "merge"),
        ],
        key=lambda e: e["t"],
    )
    return tl


@pytest.mark.slow
def test_timeline_shows_each_nodes_view_as_a_band(tmp_path):
    """A run with views: the timeline gets a views panel under its links (taller image) and the page
    a table of who held which view when, with the suspicions and the merge in between."""
    from splitbrain.pipeline.report.data import view_bands

    tl = _gms_timeline("r-gms")
    bands = view_bands(tl.rare, tl.end_t)
    assert list(bands) == ["A", "B", "C"]
    assert [(s["t0"], s["t1"], s["label"]) for s in bands["A"]] == [
        (0.5, 4.2, "v3 A [A,B,C]"),
        (4.2, 6.0, "v5 A [A,B,C]"),
    ]
    # B was killed at 3.0 (its band stops) and restarted at 3.2 without a view until the merge.
    assert [(s["t0"], s["t1"], s["label"], s["reason"]) for s in bands["B"]] == [
        (0.5, 2.6, "v3 A [A,B,C]", "join"),
        (2.6, 3.0, "v4 B [B,C]", "suspect"),
        (4.2, 6.0, "v5 A [A,B,C]", "merge"),
    ]
    page = write_report(tmp_path / "gms", [_verdict("r-gms", "gms-split")], {}, {"r-gms": tl}, title="gms")
    plain = write_report(
        tmp_path / "plain", [_verdict("r-plain", "split")], {}, {"r-plain": _timeline("r-plain")}, title="p"
    )
    text = page.read_text()
    assert "views held per node (who believed what, when)" in text
    assert "<td>B</td><td>2.600</td><td>3.000</td><td>v4 B [B,C]</td><td>suspect</td>" in text
    assert "<td>C</td><td>2.400</td><td></td><td>suspect A</td>" in text
    assert "merge start [A,B,C]" in text
    assert "views held per node" not in plain.read_text()
    _w, h_gms = _png_size(tmp_path / "gms" / "img" / "timeline-r-gms.png")
    _w, h_plain = _png_size(tmp_path / "plain" / "img" / "timeline-r-plain.png")
    assert h_gms > h_plain


def test_timeline_shades_the_time_a_sender_was_blocked(tmp_path):
    """block/unblock events (MCAST's full window) become spans per sender, the last one open to the
    run's end; the timeline of such a run is drawn with them."""
    from splitbrain.pipeline.report.data import blocked_spans

    tl = _timeline("r-blocked")
    tl.rare += [
        {"t": 1.0, "node": "A", "kind": "block", "seqno": 20},
        {"t": 1.5, "node": "A", "kind": "unblock", "seqno": 20},
        {"t": 2.0, "node": "B", "kind": "block", "seqno": 5},
        {"t": 4.0, "node": "A", "kind": "block", "seqno": 40},
    ]
    tl.rare.sort(key=lambda e: e["t"])
    assert blocked_spans(tl.rare, "A", tl.end_t) == [(1.0, 1.5), (4.0, 6.0)]
    assert blocked_spans(tl.rare, "B", tl.end_t) == [(2.0, 6.0)]
    assert blocked_spans(tl.rare, "C", tl.end_t) == []
    page = write_report(tmp_path / "r", [_verdict("r-blocked", "flow")], {}, {"r-blocked": tl}, title="blocked")
    assert (tmp_path / "r" / "img" / "timeline-r-blocked.png").exists() and page.exists()


def _multicast_timeline(run_id):
    """Two multicast senders A and B, receivers A, B, C; C cut off 2-4 s (its delivered line
    flat), A blocked 2.5-4.2 s with its window's fill gauged."""
    from splitbrain.pipeline.timeline import SenderSeries

    def steps(hold=None):
        out = []
        for k in range(1, 60):
            t = k / 10
            seqno = k * 10 if hold is None or not (hold[0] <= t < hold[1]) else int(hold[0] * 100)
            out.append((t, seqno))
        return out

    senders = {
        "A": SenderSeries(sent=steps(), delivered={"A": steps(), "B": steps(), "C": steps(hold=(2.0, 4.0))}),
        "B": SenderSeries(sent=steps(), delivered={"A": steps(), "B": steps(), "C": steps(hold=(2.0, 4.0))}),
    }
    rare = [
        {"t": 2.0, "node": "harness", "kind": "fault_on", "fault": "partition", "detail": "#0 partition [A, B] | [C]"},
        {"t": 4.0, "node": "harness", "kind": "fault_off", "fault": "partition", "detail": "#0 partition (by #1 heal)"},
        {"t": 1.0, "node": "A", "kind": "window_fill", "low": 0, "high": 40, "count": 0},
        {"t": 2.0, "node": "A", "kind": "window_fill", "low": 5, "high": 150, "count": 0},
        {"t": 2.5, "node": "A", "kind": "block", "seqno": 201, "low": 0, "high": 200},
        {"t": 4.2, "node": "A", "kind": "unblock", "seqno": 260, "low": 150, "high": 260},
        {"t": 5.0, "node": "A", "kind": "window_fill", "low": 500, "high": 510, "count": 0},
    ]
    return RunTimeline(run_id=run_id, end_t=6.0, links={("A", "B"): LinkSeries()}, rare=rare, senders=senders)


@pytest.mark.slow
def test_a_multicast_run_has_a_panel_per_sender_with_window_fill_and_time_blocked(tmp_path):
    """A multicast timeline draws one panel per sender (not per link), with the window fill from
    window_fill/block/unblock and the time blocked; the page has the time-blocked table, the
    control messages per delivered message (MCAST's ACK, NAKACK2's STABLE) and latency per receiver."""
    from splitbrain.pipeline.report.data import blocked_total, window_fill

    tl = _multicast_timeline("r-mc")
    assert window_fill(tl.rare, "A") == [(1.0, 40), (2.0, 145), (2.5, 200), (4.2, 110), (5.0, 10)]
    assert window_fill(tl.rare, "B") == []
    assert blocked_total(tl.rare, "A", tl.end_t) == (1, 4.2 - 2.5)
    v = _verdict("r-mc", "mcast-flow")
    v.metrics["blocked"] = {"blocks": 1, "seconds": 1.7, "by_node": {"A": {"blocks": 1, "seconds": 1.7}}}
    v.metrics["overhead"]["stables"] = {"messages": 4, "per_delivered": 0.4}
    v.metrics["latency_by_receiver"] = {
        "C": {"n": 5, "mean_s": 1.0, "max_s": 2.0, "p50_s": 0.5, "p90_s": 1.9, "p99_s": 2.0}
    }
    page = write_report(tmp_path / "mc", [v], {}, {"r-mc": tl}, title="mc")
    text = page.read_text()
    assert "Time blocked per sender" in text and "<td>1.700</td>" in text
    assert "<th>stable_tx</th>" in text and "<td>0.400</td>" in text and "<th>ack_tx</th>" in text
    assert "latency per receiver" in text and "<td>C</td>" in text
    # One panel per sender (2) plus the views band would be taller than one per link (1).
    _w, h_mc = _png_size(tmp_path / "mc" / "img" / "timeline-r-mc.png")
    unicast = _multicast_timeline("r-uc")
    unicast.senders = {}
    write_report(tmp_path / "uc", [_verdict("r-uc", "x")], {}, {"r-uc": unicast}, title="uc")
    _w, h_uc = _png_size(tmp_path / "uc" / "img" / "timeline-r-uc.png")
    assert h_mc > h_uc


def test_pass_rates_name_each_protocols_variant():
    """The pass-rate dimension is the protocol's own variant key, not UNICAST3's resync for all."""
    from splitbrain.pipeline.analysis import variant_label

    assert variant_label("unicast3", "sync") == "unicast3 resync=sync"
    assert variant_label("nakack2", "0") == "nakack2 xmit_interval=0"
    assert variant_label("mcast", "512") == "mcast capacity=512"
    assert variant_label(None, None) == "(unknown)"


def test_a_run_tasks_timeline_keeps_the_coordinator_of_views_and_merges():
    """A run's task (timeline_of) keeps every field the Spark query selects for a rare event: the
    coordinator a view or merge event names reaches the report as logged, as from Spark."""
    from splitbrain.pipeline.timeline import RARE_FIELDS, timeline_of

    events = [
        {"v": 1, "t": 0.5, "node": "B", "proto": "gms", "kind": "view", "members": ["A", "B"], "view_id": 3,
         "coord": "A", "reason": "join"},
        {"v": 1, "t": 1.0, "node": "B", "proto": "gms", "kind": "merge", "phase": "request", "peer": "C", "coord": "C"},
    ]  # fmt: skip
    rare = timeline_of(events)["rare"]
    assert [(e["kind"], e["coord"]) for e in rare] == [("view", "A"), ("merge", "C")]
    assert all(tuple(e) == RARE_FIELDS for e in rare)


def test_a_new_protocol_brings_its_own_report_marks(tmp_path):
    """A protocol registered from outside names its resync, block and membership kinds in its spec,
    and the report marks them: nothing in pipeline/ knows those kinds."""
    from dataclasses import replace

    from splitbrain.node import protocols
    from splitbrain.pipeline.report.data import blocked_spans, membership_marks, views_rows, window_fill
    from splitbrain.pipeline.report.run_figures import membership_styles, resync_styles

    toy = replace(
        protocols.get("unicast"),
        name="toymarks",
        header=None,
        event_kinds={"stall": "", "go_on": "", "catch_up_tx": "", "doubt": ""},
        resync_marks=(protocols.EventMark(kind="catch_up_tx", label="catch-up sent", text="catch"),),
        membership_marks=(protocols.EventMark(kind="doubt", label="doubts a member"),),
        block_kinds=("stall", "go_on"),
        send_window_kinds=("stall",),
    )
    protocols.register(toy)
    try:
        rare = [
            {"t": 0.5, "node": "A", "kind": "view", "members": ["A", "B"], "view_id": 1},
            {"t": 1.0, "node": "A", "kind": "stall", "low": 3, "high": 10},
            {"t": 1.2, "node": "A", "kind": "doubt", "peer": "B"},
            {"t": 2.0, "node": "A", "kind": "go_on"},
            {"t": 2.5, "node": "B", "kind": "catch_up_tx", "peer": "A"},
        ]
        assert blocked_spans(rare, "A", 5.0) == [(1.0, 2.0)]
        assert window_fill(rare, "A") == [(1.0, 7)]
        assert [e["kind"] for e in membership_marks(rare)] == ["doubt"]
        assert resync_styles()["catch_up_tx"][3:] == ("catch-up sent", "catch")
        assert membership_styles()["doubt"][2] == "doubts a member"
        tl = _timeline("r-toy")
        tl.rare = sorted(tl.rare + rare, key=lambda e: e["t"])
        assert any(r["what"] == "doubt B" for r in views_rows(tl))
        page = write_report(tmp_path, [_verdict("r-toy", "toy")], {}, {"r-toy": tl}, title="toy")
        assert "catch_up_tx" in page.read_text()  # the timelines' legend names the spec's resync kinds
    finally:
        protocols.unregister("toymarks")
    assert "catch_up_tx" not in resync_styles()


def test_the_page_escapes_what_runs_wrote(tmp_path):
    """Run ids, explanations and quarantined lines are text: markup in them is shown, never run."""
    verdict = _verdict("r-<b>", "s<i>", "failed", lost=1)
    verdict.checks[1]["explanation"] = "<script>alert(1)</script> lost"
    page = write_report(
        tmp_path,
        [verdict],
        {},
        {},
        title="<title>",
        quarantine=[{"run_id": "r-<b>", "src": "x", "line": 1, "reason": "bad", "raw": "<img src=x onerror=1>"}],
    )
    text = page.read_text()
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; lost" in text
    assert "<img src=x" not in text and "&lt;img src=x onerror=1&gt;" in text
    assert "r-&lt;b&gt;" in text and "<title>&lt;title&gt;</title>" in text
