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
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitbrain.harness.checks import DEFAULT_RECOVERY_BOUND_S, GENERAL_CHECKS
from splitbrain.harness.eventlog import encode_lines
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario
from splitbrain.pipeline import columnar as K
from splitbrain.pipeline import columnar_parts as P
from splitbrain.pipeline import runwise as R
from splitbrain.pipeline import stored as ST
from splitbrain.pipeline import tasks as TK
from tests.pipeline.test_pipeline_checks import GMS_CHECKS, PLANTED, PLANTED_VIEWS, random_log, random_views_log

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))
BOUND = {"recovery_bound_s": DEFAULT_RECOVERY_BOUND_S, "resync_bound": None, "xmit_bound": None}
CHECKS = list(GENERAL_CHECKS)


def files_of(events: list[dict]) -> list[tuple[str, str]]:
    """A run's files as the harness writes them: one log per node, the timeline for the harness."""
    by_src: dict[str, list[dict]] = {}
    for ev in events:
        src = "timeline.jsonl" if ev["node"] == "harness" else f"nodes/{ev['node']}/events.jsonl"
        by_src.setdefault(src, []).append(ev)
    return sorted((src, encode_lines(evs).decode()) for src, evs in by_src.items())


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
    assert parts is not None or why in ("multicast sends", "run lines")
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
    judged = run_lines = 0
    for name, table, names, bound in scenario_tables:
        for checks in (names, CHECKS):
            why = agree(table, checks, bound)
            assert (
                why is None or why in ("multicast sends", "run lines") or why.startswith("checks the kernel does not")
            ), (
                name,
                why,
            )
            judged += why is None
            run_lines += why == "run lines"
    # Most unicast scenarios are judged by the kernel itself; a log with run lines still goes to the
    # exact path (the kernel reads one row per message).
    assert judged + run_lines >= len(scenario_tables)


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
