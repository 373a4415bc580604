"""pipeline.local_ingest and the chunked line classifier: local runs ingested in tasks that read and
write the files themselves give exactly what Spark's ingest tasks give (result documents, events,
quarantine, runs rows), and classifying lines a chunk at a time gives exactly classify_line's
answer for every line."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitbrain.harness.checks import DEFAULT_RECOVERY_BOUND_S, GENERAL_CHECKS
from splitbrain.harness.eventlog import encode_lines
from splitbrain.node.events import make_event
from splitbrain.pipeline import ingest as I
from splitbrain.pipeline import local_ingest as LI
from splitbrain.pipeline import runwise as R
from splitbrain.pipeline import schema as S
from splitbrain.pipeline import tasks as TK
from tests.pipeline.test_pipeline_checks import PLANTED, random_log, write_planted_runs, write_run
from tests.pipeline.test_pipeline_columnar import files_of
from tests.pipeline.test_pipeline_ingest import GOOD, LINES, _mutate

NOW = "2026-11-27T00:00:00.000000Z"
PLAN = (list(GENERAL_CHECKS), {"recovery_bound_s": DEFAULT_RECOVERY_BOUND_S, "resync_bound": None, "xmit_bound": None})
# A clean deliver whose reason holds "," (cut there, its halves make the misaligned pair below).
WITH_COMMA = GOOD.replace('"kind":"send"', '"kind":"note"')[:-1] + ',"text":"x,y"}'


def exact_classification(files):
    """(events, quarantine) of the files with classify_line on every line: the rules themselves."""
    events, bad = [], []
    for src, text in files:
        for i, line in enumerate(R.split_lines(text), start=1):
            ev, reason = S.classify_line(line)
            if ev is not None:
                events.append({**ev, "_src": src, "_fk": R.file_key(src), "_line": i})
            elif reason is not None:
                raw = line[: S.RAW_MAX_CHARS]
                bad.append({"src": src, "file_key": R.file_key(src), "line": i, "reason": reason, "raw": raw})
    return events, bad


def same(got, want) -> bool:
    """Equal as JSON text: an int for a float (or True for 1) differs."""
    return json.dumps(got) == json.dumps(want)


def random_lines(rng: random.Random) -> list[str]:
    """Clean event lines with the tricky and mutated ones of the ingest tests among them, blank
    lines, and a clean line run together with the first half of the next one, whose second half
    follows on its own line (together one array of two dicts, written exactly as they are)."""
    lines = []
    for i in range(rng.randrange(1, 60)):
        ev = make_event(round(rng.random() * 10, 3), rng.choice("AB"), "unicast3", "send", peer="B", seqno=i)
        line = json.dumps(ev, separators=(",", ":"))
        pick = rng.random()
        if pick < 0.1:
            lines.append(rng.choice(LINES))
        elif pick < 0.2:
            lines.append(_mutate(rng, line))
        elif pick < 0.25:
            head, tail = WITH_COMMA.split(",y")
            lines += [line + "," + head, "y" + tail]
        else:
            lines.append(line)
    return lines


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(["a", "\n", "\r", "\r\n", "\x0b", "\x85", "\u2028", "{"]), max_size=40).map("".join)
)
def test_split_lines_without_cr_equals_the_regex(text):
    """split_lines' shortcut for texts without \r cuts them as the regex of \n, \r\n and \r."""
    want = re.split(r"\r\n|\r|\n", text)
    if want and want[-1] == "":
        want.pop()
    assert R.split_lines(text) == want


def test_misaligned_lines_are_not_taken_for_events():
    """Two lines that are together exactly "[d1,d2]" but cut elsewhere than between the dicts:
    classify_line quarantines the first (two objects) and the second (not JSON)."""
    head, tail = WITH_COMMA.split(",y")
    lines = [GOOD + "," + head, "y" + tail]
    files = [("nodes/A/events.jsonl", "\n".join(lines))]
    want = exact_classification(files)
    assert len(want[1]) == 2
    assert same(R.classify_files(files), want)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), chunk=st.sampled_from((1, 2, 3, 7, R.CHUNK_LINES)))
def test_chunked_classification_equals_classify_line(seed, chunk):
    """Random files of clean, tricky, mutated, blank and misaligned lines, classified a chunk at a
    time with several chunk sizes: the same events (same values, same types) and the same
    quarantine, reason for reason, as classify_line line by line."""
    rng = random.Random(seed)
    text = "\n".join(random_lines(rng)) + rng.choice(("", "\n", "\r\n"))
    files = [("nodes/A/events.jsonl", text)]
    saved = R.CHUNK_LINES
    R.CHUNK_LINES = chunk
    try:
        got = R.classify_files(files)
    finally:
        R.CHUNK_LINES = saved
    assert same(got, exact_classification(files))


def task_rows(files, plan, emit):
    """What the ingest task of Spark's path gives for the files: its OUT_SCHEMA rows of `emit`
    and the result document it adds to the accumulator."""
    import pyarrow as pa

    collected: dict[str, str] = {}

    class Collect:
        def add(self, update):
            collected.update(update)

    table = pa.table({"path": [f"file:/runs/run/{src}" for src, _ in files], "value": [t for _, t in files]})
    return TK.ingest_function({"run": plan}, plan, Collect(), emit)(table), collected.get("run")


def assert_same_run(files, plan):
    """The local path's rows and document, and the Spark task's, equal the exact path's: every
    line through classify_line, the run judged on its dicts (result_document), rows from dicts."""
    events, bad = exact_classification(files)
    R.order(events)
    want_result = TK.result_document(events, plan, len(bad))
    want_events = TK.out_table("run", events, [], None)
    want_bad = TK.out_table("run", [], bad, None)
    rows = LI.judge_files("run", files, plan)
    assert rows.result == want_result
    assert rows.events.equals(I._event_columns(want_events))
    assert rows.events.schema == I._event_columns(want_events).schema
    if rows.quarantine is None:
        assert not bad
    else:
        assert rows.quarantine.equals(I._quarantine_columns(want_bad))
    out, result = task_rows(files, plan, TK.EMIT_EVENTS)
    assert result == want_result
    assert out.equals(want_events) and out.schema == want_events.schema
    assert task_rows(files, plan, TK.EMIT_QUARANTINE)[0].equals(want_bad)


def run_files(run_dir) -> list[tuple[str, str]]:
    paths = [*run_dir.glob("nodes/*/events.jsonl"), *run_dir.glob("timeline.jsonl")]
    return sorted((str(p.relative_to(run_dir)), p.read_bytes().decode("utf-8")) for p in paths)


@pytest.mark.parametrize("timeline", [False, True])
def test_judge_files_equals_the_ingest_task_on_planted_runs(runs_root, timeline):
    """Every planted run (malformed and torn lines among them) and random soup, with and without
    its timeline."""
    for run_dir in sorted(runs_root.iterdir()):
        assert_same_run(run_files(run_dir), (*PLAN, timeline))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), int_t=st.booleans())
def test_judge_files_equals_the_ingest_task_on_random_soups(seed, int_t):
    """Random soups, some with a whole-number t written as an int (the columns would read it
    back as a float: such a run is judged on its dicts) and corrupted lines among them."""
    rng = random.Random(seed)
    events = random_log(rng)
    if int_t:
        events = [dict(ev, t=int(ev["t"])) if rng.random() < 0.2 else ev for ev in events]
    files = files_of(events)
    src, text = files[0]
    files[0] = (src, text + "\n".join(_mutate(rng, GOOD) for _ in range(3)))
    assert_same_run(files, (*PLAN, rng.random() < 0.3))


def test_values_arrow_repairs_give_the_same_rows():
    """A lone surrogate (stored as U+FFFD) and an int beyond 64 bits as t: the same document and
    rows (such lines are classified by classify_line, so the run is judged on its dicts)."""
    lines = [GOOD, GOOD.replace('"peer":"B"', '"peer":"\\ud800"'), GOOD.replace("1.5", "1180591620717411303424")]
    assert_same_run([("nodes/A/events.jsonl", encode_lines([]).decode() + "\n".join(lines))], (*PLAN, False))


# ---- ingest: the local path against Spark's ---------------------------------------------------


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """Planted runs (malformed and torn lines among them) and random soups."""
    root = tmp_path_factory.mktemp("local-ingest-runs")
    write_planted_runs(root, 6, 4000)
    return root


def _warehouse(spark, wh: str) -> dict:
    return {
        "events": sorted(map(repr, I.load_events(spark, wh).collect())),
        "quarantine": sorted(map(repr, I.load_quarantine(spark, wh).collect())),
        "runs": sorted(map(repr, I.load_runs(spark, wh).collect())),
    }


def spark_path_only(monkeypatch):
    """Make ingest leave every run to Spark's tasks."""
    monkeypatch.setattr(LI, "local_runs", lambda runs, wh: ([], list(runs)))


def test_local_ingest_equals_the_spark_tasks(spark, runs_root, tmp_path, monkeypatch):
    """The same results, quarantine counts and warehouse rows; the partitions written by the tasks
    with pyarrow (none by Spark's writer)."""
    local = I.ingest(spark, [str(runs_root)], str(tmp_path / "local"), now=NOW)
    with monkeypatch.context() as m:
        spark_path_only(m)
        by_spark = I.ingest(spark, [str(runs_root)], str(tmp_path / "spark"), now=NOW)
    assert local.results == by_spark.results
    assert local.quarantined == by_spark.quarantined and local.quarantined
    assert _warehouse(spark, str(tmp_path / "local")) == _warehouse(spark, str(tmp_path / "spark"))
    assert writers(tmp_path / "local") == {"driver"}
    assert writers(tmp_path / "spark") == {"spark"}


def test_a_run_that_is_not_utf8_is_left_to_spark(spark, tmp_path):
    """A file that is not strict UTF-8 sends its run to Spark's tasks; the other runs stay local."""
    run = write_run(tmp_path / "runs", "not-utf8", PLANTED["clean"]["events"])
    with (run / "nodes" / "A" / "events.jsonl").open("ab") as out:
        out.write(b'{"v":1,"t":9.5,"node":"A","proto":"unicast3","kind":"note","text":"caf\xe9"}\n')
    write_run(tmp_path / "runs", "clean", PLANTED["clean"]["events"])
    result = I.ingest(spark, [str(tmp_path / "runs")], str(tmp_path / "wh"), now=NOW)
    assert set(result.results) == {"clean", "not-utf8"}
    assert writers(tmp_path / "wh", "not-utf8") == {"spark"}
    assert writers(tmp_path / "wh", "clean") == {"driver"}


def writers(warehouse, run_id: str = "*") -> set[str]:
    """Who wrote the events and quarantine files: "spark" (its row metadata is in them) or
    "driver" (pyarrow, pipeline.partition_write)."""
    import pyarrow.parquet as pq

    files = [
        *warehouse.glob(f"{I.EVENTS_DIR}/run_id={run_id}/*.parquet"),
        *warehouse.glob(f"{I.QUARANTINE_DIR}/run_id={run_id}/*.parquet"),
    ]
    assert files
    spark_key = b"org.apache.spark.sql.parquet.row.metadata"
    return {"spark" if spark_key in (pq.read_schema(f).metadata or {}) else "driver" for f in files}
