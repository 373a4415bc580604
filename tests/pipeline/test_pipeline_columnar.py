"""The columnar judge (pipeline.columnar) gives exactly harness.checks.run_checks' result dicts,
and pipeline.columnar_parts exactly pipeline.runwise.result_parts' rows: on every scenario of
scenarios/ run in the simulator, on planted defects and on random event soups, compared as JSON
text (so an int for a float, a reordered row or key fails too). Each run is stored the way ingest
stores it (lines classified, ordered, turned into Arrow columns) without Spark, and judged both
by the kernels and by the exact per-event path of pipeline.tasks."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitbrain.harness.checks import DEFAULT_RECOVERY_BOUND_S, GENERAL_CHECKS
from splitbrain.harness.eventlog import encode_lines
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario
from splitbrain.node.events import RUN_VERSION, compact_runs, make_event
from splitbrain.pipeline import columnar as K
from splitbrain.pipeline import columnar_parts as P
from splitbrain.pipeline import runwise as R
from splitbrain.pipeline import stored as ST
from splitbrain.pipeline import tasks as TK
from tests.pipeline.test_pipeline_checks import (
    GMS_CHECKS,
    NODES,
    PLANTED,
    PLANTED_VIEWS,
    random_log,
    random_views_log,
)

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))
BOUND = {"recovery_bound_s": DEFAULT_RECOVERY_BOUND_S, "resync_bound": None, "xmit_bound": None}
CHECKS = list(GENERAL_CHECKS)


def files_of(events: list[dict], runs: bool = False) -> list[tuple[str, str]]:
    """A run's files as the harness writes them: one log per node, the timeline for the harness;
    with `runs`, each file's consecutive sends and deliveries of one batch as run lines."""
    by_src: dict[str, list[dict]] = {}
    for ev in events:
        src = "timeline.jsonl" if ev["node"] == "harness" else f"nodes/{ev['node']}/events.jsonl"
        by_src.setdefault(src, []).append(ev)
    return sorted((src, encode_lines(compact_runs(evs) if runs else evs).decode()) for src, evs in by_src.items())


def stored(files: list[tuple[str, str]], run_id: str = "run") -> pa.Table:
    """The run's rows as the warehouse holds them (pipeline.tasks' event rows of the ingest task)."""
    events, _bad = R.classify_files(files)
    R.order(events)
    table = TK.out_table(run_id, events, [], None)
    # As Spark hands a group to the task: in any order (the judge orders by seq itself).
    return table.take(pa.array(np.random.default_rng(len(events)).permutation(table.num_rows)))


def exact(table: pa.Table, names, bound) -> list[dict]:
    return R.judge(TK.stored_events(table), list(names), bound)


def coded(table: pa.Table, repeated: bool) -> pa.Table:
    """The table with the string columns pipeline.stored reads as dictionaries made dictionaries
    unlike dictionary_encode's: sorted, with an unused value and, `repeated`, every value twice
    (rows alternating between the copies), which Parquet does not forbid."""
    for name in ST.CODED_COLUMNS:
        rows = table.column(name).to_pylist()
        values = [*sorted({v for v in rows if v is not None}), "~unused"]
        where = {v: i for i, v in enumerate(values)}
        copies = 2 if repeated else 1
        idx = [None if v is None else where[v] + len(values) * (i % copies) for i, v in enumerate(rows)]
        column = pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), pa.array(values * copies))
        table = table.set_column(table.column_names.index(name), name, column)
    return table


def agree(table: pa.Table, names=CHECKS, bound=BOUND) -> str | None:
    """Compare kernels and exact path; the check kernel's fallback reason, or None when it judged.
    The parts kernel must handle every run without multicast sends. Both kernels give the same
    text on the run's string columns as dictionaries (as pipeline.stored reads them)."""
    got, why = K.judge_table(table, list(names), bound)
    for repeated in (False, True):
        variant = coded(table, repeated)
        assert json.dumps(K.judge_table(variant, list(names), bound)) == json.dumps((got, why)), repeated
        assert json.dumps(P.parts_of_table(variant)) == json.dumps(P.parts_of_table(table)), repeated
    if got is not None:
        want = exact(table, names, bound)
        assert json.dumps(got) == json.dumps(want), (json.dumps(got)[:1500], json.dumps(want)[:1500])
    parts = P.parts_of_table(table)
    assert parts is not None or why == "multicast sends"
    if parts is not None:
        want_parts = R.result_parts(TK.stored_events(table))
        assert json.dumps(parts) == json.dumps(want_parts), (json.dumps(parts)[:1500], json.dumps(want_parts)[:1500])
    return why


def test_planted_defects_agree():
    """Every planted run of the pipeline's check tests (reordered, duplicated, missing deliveries,
    windows never synced, stuck retransmission, redeliveries after a restart or a reaped window,
    acked or not, a kill after a heal, errors, aggregated drops) is judged by the kernel itself,
    with the exact path's dicts."""
    whys = {name: agree(stored(files_of(spec["events"]))) for name, spec in PLANTED.items() if spec["events"]}
    assert not any(whys.values()), whys


def both_forms(events: list[dict], names=CHECKS, bound=BOUND) -> tuple[list[dict], int]:
    """The kernel's results on a log in both forms (one line per message; run lines), each equal
    to the harness's on that form, and equal to each other; and the run rows of the run form."""
    v1, v2 = stored(files_of(events)), stored(files_of(events, runs=True))
    for table in (v1, v2):
        assert agree(table, names, bound) is None
    got, _ = K.judge_table(v2, list(names), bound)
    assert json.dumps(got) == json.dumps(K.judge_table(v1, list(names), bound)[0])
    return got, int(pc.sum(pc.equal(v2.column("v"), RUN_VERSION)).as_py() or 0)


def _batch(t: float, kind: str, first: int, count: int) -> list[dict]:
    """A batch of `count` sends A->B (or deliveries at B) of A:0:first.., one event each."""
    node, peer = ("A", "B") if kind == "send" else ("B", "A")
    return [
        make_event(t, node, "unicast3", kind, peer=peer, seqno=n + 1, conn_id=1, app=f"A:0:{n}", bytes=100)
        for n in range(first, first + count)
    ]


def _planted_runs(deliveries: list[dict]) -> list[dict]:
    final = {"conn_id": 1, "low": 300, "high": 300, "state": "OPEN", "final": True}
    return [
        make_event(0.0, "A", "node", "node_start", incarnation=0),
        make_event(0.0, "B", "node", "node_start", incarnation=0),
        *_batch(1.0, "send", 0, 100),
        *_batch(1.1, "send", 100, 200),
        *deliveries,
        make_event(1.5, "A", "unicast3", "ack_rx", peer="B", seqno=300, conn_id=1),
        make_event(10.0, "A", "unicast3", "window", peer="B", side="send", **final),
        make_event(10.0, "B", "unicast3", "window", peer="A", side="recv", **final),
    ]


PLANTED_RUNS = {
    "clean": (_planted_runs(_batch(1.01, "deliver", 0, 150) + _batch(1.21, "deliver", 150, 150)), []),
    # A gap between two delivered runs: A:0:150..159 never delivered.
    "gap": (_planted_runs(_batch(1.01, "deliver", 0, 150) + _batch(1.21, "deliver", 160, 140)), ["no_loss"]),
    # Two runs that overlap: A:0:150..159 delivered twice, the second time out of order.
    "overlap": (
        _planted_runs(_batch(1.01, "deliver", 0, 160) + _batch(1.21, "deliver", 150, 150)),
        ["fifo", "no_duplicates"],
    ),
    # A run delivered before the one it follows, and a stretch of a run delivered again later.
    "back": (
        _planted_runs(
            _batch(1.01, "deliver", 100, 200) + _batch(1.21, "deliver", 0, 100) + _batch(1.3, "deliver", 40, 3)
        ),
        ["fifo", "no_duplicates"],
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED_RUNS))
def test_planted_run_defects_agree(name):
    """Planted defects in logs of batches, on the run form and on the one-line-per-message form:
    the kernel judges both itself (no fallback), with the harness's dicts, and the checks that
    must fail fail, naming the messages inside the runs."""
    events, failing = PLANTED_RUNS[name]
    got, run_rows = both_forms(events)
    assert run_rows >= 4
    assert sorted(r["name"] for r in got if not r["passed"]) == failing
    by_name = {r["name"]: r for r in got}
    if name == "gap":
        assert by_name["no_loss"]["details"]["lost"]["A->B"]["first"] == [f"A:0:{n}" for n in range(150, 160)]
    if name == "overlap":
        assert by_name["no_duplicates"]["details"]["duplicates"] == 10
        assert by_name["fifo"]["details"]["violations"] == 9  # A:0:159 is not below the highest, 159


def test_a_gap_inside_a_run_line_is_quarantined_and_its_messages_are_lost():
    """A run line whose seqnos say more messages than its count (a gap inside the line) is not
    judged as messages that never existed: ingest quarantines it, and no_loss names them lost."""
    events = PLANTED_RUNS["clean"][0]
    files = files_of(events, runs=True)
    node_b = dict(files)["nodes/B/events.jsonl"].splitlines()
    bad = [i for i, line in enumerate(node_b) if '"kind":"deliver"' in line][1]
    run = json.loads(node_b[bad])
    run["last_seqno"] += 1
    node_b[bad] = json.dumps(run, separators=(",", ":"))
    files = [(src, "\n".join(node_b) + "\n" if src == "nodes/B/events.jsonl" else text) for src, text in files]
    events_in, quarantined = R.classify_files(files)
    assert [q["reason"] for q in quarantined] == ["bad run line: seqnos 151..301 are not 150 messages"]
    R.order(events_in)
    table = TK.out_table("run", events_in, [], None)
    assert agree(table) is None
    got = {r["name"]: r for r in K.judge_table(table, CHECKS, BOUND)[0]}
    assert not got["no_loss"]["passed"] and got["no_loss"]["details"]["lost"]["A->B"]["count"] == 150


@pytest.mark.parametrize("seed", range(12))
def test_run_soups_agree(seed):
    """Random soups of batches (skips, overlaps, streams going back, redeliveries across discards
    and restarts, retransmitted batches): the kernel judges both forms itself, with the harness's
    dicts, and the two forms' results are equal."""
    _got, run_rows = both_forms(random_runs_log(random.Random(seed)))
    assert run_rows


@pytest.mark.slow
@pytest.mark.timeout(1200)  # each example judges both forms several ways; the machine may be busy
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), bound=st.sampled_from((0.0, 1.0, DEFAULT_RECOVERY_BOUND_S)))
def test_random_run_soups_agree(seed, bound):
    """As test_run_soups_agree over many seeds and recovery bounds, each check alone too."""
    events = random_runs_log(random.Random(seed))
    b = dict(BOUND, recovery_bound_s=bound)
    both_forms(events, CHECKS, b)
    both_forms(events, [random.Random(seed).choice(CHECKS)], b)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), bound=st.sampled_from((0.0, 1.0, DEFAULT_RECOVERY_BOUND_S)))
def test_random_soups_agree(seed, bound):
    """Random event soups (restarts, kills, windows opened, re-keyed, closed, faults, errors, empty
    and missing peers, repeated and reordered deliveries, t out of order in a file): identical
    dicts for every check alone and all together, with several recovery bounds."""
    table = stored(files_of(random_log(random.Random(seed))))
    b = dict(BOUND, recovery_bound_s=bound)
    assert agree(table, CHECKS, b) is None
    assert agree(table, [random.Random(seed).choice(CHECKS)], b) is None


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_membership_soups_agree(seed):
    """views_agree (and the others) on random membership soups and on the planted view runs:
    merged, asymmetric, a dead member listed, a restarted node not rejoined, no views at all."""
    assert agree(stored(files_of(random_views_log(random.Random(seed)))), [*GMS_CHECKS, *CHECKS]) is None
    for events in PLANTED_VIEWS.values():
        assert agree(stored(files_of(events)), [*GMS_CHECKS, *CHECKS]) is None


@pytest.fixture(scope="module")
def scenario_tables(tmp_path_factory):
    """One sim run of every scenario of scenarios/ (its own seed) and its stored table."""
    out = tmp_path_factory.mktemp("scenario-runs")
    runs = []
    for path in SCENARIOS:
        outcome = run_scenario(load_scenario(path), backend="sim", out=out)
        run_dir = outcome.run_dir
        files = sorted(
            (str(p.relative_to(run_dir)), p.read_text(encoding="utf-8"))
            for p in [*run_dir.glob("nodes/*/events.jsonl"), *run_dir.glob("timeline.jsonl")]
        )
        sc = outcome.result.scenario
        bound = {"recovery_bound_s": sc.recovery_bound, "resync_bound": sc.resync_bound, "xmit_bound": sc.xmit_bound}
        names = [c.name for c in outcome.verdict.checks]
        runs.append((path.stem, stored(files), names, bound))
    return runs


@pytest.mark.slow
def test_every_scenario_agrees(scenario_tables):
    """Every scenario, judged by its own checks and bounds and by the five general checks: the
    kernel's dicts are the exact path's, and it falls back only for the reasons it states
    (multicast sends, checks it does not compute)."""
    assert len(scenario_tables) >= 5
    judged = with_runs = 0
    for name, table, names, bound in scenario_tables:
        for checks in (names, CHECKS):
            why = agree(table, checks, bound)
            assert why is None or why == "multicast sends" or why.startswith("checks the kernel does not"), (name, why)
            judged += why is None
            with_runs += why is None and pc.any(pc.equal(table.column("v"), RUN_VERSION)).as_py()
    assert judged >= len(scenario_tables)  # most unicast scenarios are judged by the kernel itself
    assert with_runs  # logs with run lines among them (the simulator writes runs)


@pytest.mark.parametrize("timeline", [False, True])
def test_judge_function_documents_are_unchanged(timeline):
    """The task judging a run from the warehouse returns the same result document, byte for byte,
    with the kernels as with the exact path (failing runs, a stuck link, a clean one; with and
    without the timeline, which still comes from the events)."""
    for name in ("missing", "redelivered_acked", "stuck", "late_kill", "clean"):
        table = stored(files_of(PLANTED[name]["events"]), run_id=name)
        plan = (CHECKS, BOUND, timeline)
        row = TK.judge_function({name: plan}, {name: 2})(table)
        assert row.column("result")[0].as_py() == TK.result_document(TK.stored_events(table), plan, 2)


BROKEN = {
    # conn_state no longer reaches harness.checks' classes: discards and reaped windows are missed.
    "conn_state unseen": lambda mp: mp.setattr(K, "RARE_KINDS", K.RARE_KINDS - {"conn_state"}),
    # fifo's running maximum is not reset by a discard (the epoch key is ignored).
    "epochs ignored": lambda mp: mp.setattr(K, "_group_starts", lambda *keys: _GROUP_STARTS(*keys[:-1])),
    # Metric rows in key order instead of the order the walk inserts them.
    "rows sorted": lambda mp: mp.setattr(P, "_counts_in_order", lambda keys: sorted(_COUNTS_IN_ORDER(keys))),
}
_COUNTS_IN_ORDER = P._counts_in_order
_GROUP_STARTS = K._group_starts


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_kernel_is_caught(broken, monkeypatch):
    """The comparison fails when the kernel is wrong: a deliberately broken variant disagrees
    with the exact path on some planted or random run."""
    BROKEN[broken](monkeypatch)
    tables = [stored(files_of(spec["events"])) for spec in PLANTED.values() if spec["events"]]
    tables += [stored(files_of(random_log(random.Random(1000 + i)))) for i in range(60)]
    caught = 0
    for table in tables:
        try:
            agree(table)
        except AssertionError:
            caught += 1
    assert caught


@pytest.mark.timeout(900)  # a Spark session and two jobs; the shared machine can be very busy
def test_spark_judging_from_parquet_equals_the_ingest_verdicts(spark, tmp_path):
    """In Spark: runs judged from the warehouse (the stored-run tasks, on the stored columns) get
    the results their ingest gave (the exact per-event path), metrics included."""
    from splitbrain.pipeline import analysis as A
    from tests.pipeline.test_pipeline_checks import write_run

    root = tmp_path / "runs"
    for name in ("missing", "stuck", "redelivered_unacked"):
        write_run(root, name, PLANTED[name]["events"])
    write_run(root, "random", random_log(random.Random(1001)))
    warehouse = str(tmp_path / "warehouse")
    first = A.analyze(spark, [str(root)], warehouse)
    stored_verdicts = A.analyze_runs(spark, warehouse, [v.run_id for v in first.verdicts])
    assert [(v.run_id, v.checks, v.outcome, v.metrics) for v in stored_verdicts] == [
        (v.run_id, v.checks, v.outcome, v.metrics) for v in first.verdicts
    ]


def random_runs_log(rng: random.Random) -> list[dict]:
    """An event soup of batches: sends and deliveries of consecutive app ids at one time (which
    compact_runs makes run lines), deliveries that skip a gap, overlap an earlier batch, go back
    in a stream or come again after a window's discard or a restart, retransmitted batches, acks,
    faults, lifecycles, errors and final windows."""
    evs: list[dict] = []
    t = 0.0
    next_n = {(x, y, s): 0 for x in NODES for y in NODES if x != y for s in (0, 1)}
    for node in NODES:
        if rng.random() < 0.9:
            evs.append(make_event(0.0, node, "node", "node_start", incarnation=0))
    if not any(ev["node"] in NODES for ev in evs):
        evs.append(make_event(0.0, "A", "node", "node_start"))
    for _ in range(rng.randint(10, 60)):
        t = round(t + rng.choice((0.0, 0.1, 0.2, 0.5)), 1)
        r = rng.random()
        x, y = rng.sample(NODES, 2)
        stream = rng.choice((0, 0, 1))
        conn = rng.choice((1, 1, 2))
        key = (x, y, stream)
        if r < 0.3:
            first = next_n[key]
            size = rng.randint(1, 8)
            next_n[key] += size
            for n in range(first, first + size):
                app = f"{x}:{stream}:{n}"
                evs.append(make_event(t, x, "unicast3", "send", peer=y, seqno=n + 1, conn_id=conn, app=app, bytes=100))
        elif r < 0.6 and next_n[key]:
            # A batch of deliveries: mostly where the stream is, sometimes skipping, overlapping
            # or going back.
            top = next_n[key]
            first = rng.choice((max(0, top - rng.randint(1, 8)), rng.randint(0, top - 1), 0))
            last = min(top - 1, first + rng.randint(0, 8))
            peer = rng.choice((x, x, x, None, ""))
            fields = {"peer": peer} if peer is not None else {}
            for n in range(first, last + 1):
                evs.append(
                    make_event(
                        t,
                        y,
                        "unicast3",
                        "deliver",
                        seqno=n + 1,
                        conn_id=conn,
                        app=f"{x}:{stream}:{n}",
                        bytes=100,
                        **fields,
                    )
                )
        elif r < 0.66:
            state, reason = rng.choice((("CLOSED", "close_rx"), ("CLOSED", "replaced"), ("OPEN", "new_window:first")))
            evs.append(
                make_event(
                    t, y, "unicast3", "conn_state", peer=x, side="recv", state=state, conn_id=conn, reason=reason
                )
            )
        elif r < 0.69:
            evs.append(
                make_event(
                    t, x, "unicast3", "conn_state", peer=y, side="send", state="OPEN", conn_id=conn, reason="created"
                )
            )
        elif r < 0.76:
            evs.append(
                make_event(t, x, "unicast3", "ack_rx", peer=y, seqno=rng.randint(0, next_n[key] + 1), conn_id=conn)
            )
        elif r < 0.79:
            kind = rng.choice(("node_start", "node_stop"))
            fields = (
                {"incarnation": rng.randint(1, 3)} if kind == "node_start" else {"reason": rng.choice(("kill", "stop"))}
            )
            evs.append(make_event(t, x, "node", kind, **fields))
        elif r < 0.83:
            evs.append(
                make_event(
                    t, "harness", "harness", rng.choice(("fault_on", "fault_off")),
                    fault="partition", detail="#0 x", links=[f"{x}->{y}"],
                )
            )  # fmt: skip
        elif r < 0.9:
            first = rng.randint(1, 5)
            for seqno in range(first, first + rng.randint(1, 4)):
                evs.append(
                    make_event(t, x, "unicast3", "retransmit", peer=y, seqno=seqno, conn_id=conn, reason="xmit_req")
                )
        elif r < 0.91:
            evs.append(make_event(t, x, "unicast3", "error", reason="KeyError: 3", detail="protocol.py:1 f: x"))
        else:
            evs.append(make_event(t, y, "unicast3", "xmit_req_tx", peer=x, count=2, ranges=[[1, 2]], conn_id=conn))
    t += 1.0
    for x in NODES:
        for y in NODES:
            if x != y:
                for side in ("send", "recv"):
                    evs.append(
                        make_event(t, x, "unicast3", "window", peer=y, side=side, conn_id=1, low=0, high=0,
                                   state="OPEN", final=True)
                    )  # fmt: skip
    return evs
