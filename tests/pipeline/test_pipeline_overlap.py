"""pipeline.overlap: runs judged on the driver while the session starts give exactly what the
Spark tasks give (results, events, quarantine, runs rows); the driver leaves to Spark what it
cannot take; small inputs start the JVM with C1 only."""

from __future__ import annotations

import threading

import pytest

from splitbrain.pipeline import ingest as I
from splitbrain.pipeline import local_ingest as LI
from splitbrain.pipeline import overlap as O
from splitbrain.pipeline import session as SS
from tests.pipeline.test_pipeline_checks import PLANTED, write_planted_runs, write_run

NOW = "2026-11-27T00:00:00.000000Z"


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """Planted runs (malformed and torn lines among them) and random soups."""
    root = tmp_path_factory.mktemp("overlap-runs")
    write_planted_runs(root, 6, 3000)
    return root


def _warehouse(spark, wh: str) -> dict:
    runs = [{k: v for k, v in r.asDict(recursive=True).items()} for r in I.load_runs(spark, wh).collect()]
    return {
        "events": sorted(map(repr, I.load_events(spark, wh).collect())),
        "quarantine": sorted(map(repr, I.load_quarantine(spark, wh).collect())),
        "runs": sorted(map(repr, runs)),
    }


def _prejudge(paths: list[str], stop: threading.Event) -> I.Prejudged:
    runs = I.select_runs(None, paths)
    plans = I.timeline_plans(I.metadata_rows(None, runs, NOW), runs, 24)
    return O.judge_on_driver(runs, plans, stop)


def test_runs_judged_on_the_driver_equal_the_tasks(spark, runs_root, tmp_path, monkeypatch):
    """Every run the driver can take, judged there and written from its rows, gives the same
    result documents and warehouse rows as the Spark tasks; a driver result judged with another
    plan than ingest's is not used."""
    monkeypatch.setattr(LI, "local_runs", lambda runs, wh: ([], list(runs)))  # Spark's tasks only
    paths = [str(runs_root)]
    tasks_only = I.ingest(spark, paths, str(tmp_path / "a"), now=NOW)
    pre = _prejudge(paths, threading.Event())  # never set: the driver takes every run it can
    assert set(pre.results) == {p.name for p in runs_root.iterdir()}
    assert set(pre.quarantine) == set(tasks_only.quarantined)
    assert pre.quarantine  # the planted malformed lines are there
    # A stale plan (another timeline choice) makes ingest judge that run in Spark again.
    pre.plans["clean"] = (*pre.plans["clean"][:2], not pre.plans["clean"][2])
    pre.results["clean"] = "not a result document"
    mixed = I.ingest(spark, paths, str(tmp_path / "b"), prejudged=pre, now=NOW)
    assert mixed.results == tasks_only.results
    assert mixed.metas == tasks_only.metas
    assert mixed.quarantined == tasks_only.quarantined
    assert _warehouse(spark, str(tmp_path / "b")) == _warehouse(spark, str(tmp_path / "a"))
    assert _writers(tmp_path / "b") == {"spark", "driver"}  # "clean" was left to the tasks


def test_rows_the_driver_does_not_write_go_through_spark(spark, runs_root, tmp_path, monkeypatch):
    """Where the driver does not write a partition itself (a remote warehouse, a run id Spark
    would escape), Spark writes the driver's rows: the same warehouse rows as the tasks'."""
    paths = [str(runs_root)]
    tasks_only = I.ingest(spark, paths, str(tmp_path / "a"), now=NOW)
    pre = _prejudge(paths, threading.Event())
    monkeypatch.setattr(I.PW, "local_partition", lambda table_dir, run_id: None)
    spark_written = I.ingest(spark, paths, str(tmp_path / "b"), prejudged=pre, now=NOW)
    assert spark_written.results == tasks_only.results
    assert _warehouse(spark, str(tmp_path / "b")) == _warehouse(spark, str(tmp_path / "a"))
    assert _writers(tmp_path / "b") == {"spark"}


def _writers(warehouse) -> set[str]:
    """Who wrote the events and quarantine files of a warehouse: "spark" (its row metadata is
    in the file) or "driver"."""
    import pyarrow.parquet as pq

    files = [*warehouse.glob(f"{I.EVENTS_DIR}/*/*.parquet"), *warehouse.glob(f"{I.QUARANTINE_DIR}/*/*.parquet")]
    assert files
    spark_key = b"org.apache.spark.sql.parquet.row.metadata"
    return {"spark" if spark_key in (pq.read_schema(f).metadata or {}) else "driver" for f in files}


def test_a_file_that_is_not_utf8_leaves_its_run_to_spark(tmp_path):
    """Python's text of bytes that are not UTF-8 need not be Spark's: the driver does not take
    such a run (its files are not read into a task table)."""
    run = write_run(tmp_path, "not-utf8", PLANTED["clean"]["events"])
    with (run / "nodes" / "A" / "events.jsonl").open("ab") as out:
        out.write(b'{"v":1,"t":9.5,"node":"A","proto":"unicast3","kind":"send","peer":"B\xff"}\n')
    write_run(tmp_path, "clean", PLANTED["clean"]["events"])
    pre = _prejudge([str(tmp_path)], threading.Event())
    assert set(pre.results) == {"clean"}


def test_a_run_that_is_not_utf8_is_read_as_the_harness_reads_it(spark, tmp_path):
    """Spark's tasks decode a file that is not UTF-8 as the harness reads node logs: each bad
    byte a U+FFFD, so the run is judged as the same run with the replacement already written."""
    bad_line = b'{"v":1,"t":9.5,"node":"A","proto":"unicast3","kind":"note","text":"caf\xe9 \xff"}\n'
    for name, line in (("raw", bad_line), ("replaced", bad_line.decode("utf-8", errors="replace").encode())):
        run = write_run(tmp_path / name, "run", PLANTED["clean"]["events"])
        with (run / "nodes" / "A" / "events.jsonl").open("ab") as out:
            out.write(line)
    raw = I.ingest(spark, [str(tmp_path / "raw")], str(tmp_path / "wh-raw"), now=NOW)
    replaced = I.ingest(spark, [str(tmp_path / "replaced")], str(tmp_path / "wh-replaced"), now=NOW)
    assert raw.results == replaced.results and raw.quarantined == replaced.quarantined
    stored = (
        I.load_events(spark, str(tmp_path / "wh-raw")).collect()
        + I.load_quarantine(spark, str(tmp_path / "wh-raw")).collect()
    )
    assert "caf\ufffd \ufffd" in "".join(map(str, stored))


def test_the_driver_stops_once_the_session_is_up(runs_root):
    """With the session already up the driver judges one run, and leaves the rest to Spark."""
    up = threading.Event()
    up.set()
    assert len(_prejudge([str(runs_root)], up).results) == 1


def test_analyze_command_equals_the_tasks_report(spark, runs_root, tmp_path):
    """The analyze command (driver judging one run here: the test session is already up) writes
    the report and verdicts an analysis by the tasks alone writes."""
    import json

    from splitbrain.harness.cli import main
    from splitbrain.pipeline import analysis as A

    code = main(["analyze", str(runs_root), "--out", str(tmp_path / "cli"), "--quiet"])
    assert code == 1  # planted defects fail
    analysis = A.analyze(spark, [str(runs_root)], str(tmp_path / "tasks" / "warehouse"))
    A.build_report(spark, analysis, str(tmp_path / "tasks" / "report"), title="t")

    def verdicts(out):
        docs = json.loads((out / "report" / "verdicts.json").read_text())
        for d in docs:
            d["meta"].pop("ingested_at")
        return docs

    assert verdicts(tmp_path / "cli") == verdicts(tmp_path / "tasks")


def test_small_local_inputs_start_the_jvm_with_c1_only(runs_root, monkeypatch):
    """jit_for: C1 only for a small local input, the default for a big or a remote one; the
    environment variable overrides the caller either way."""
    runs = O.local_runs([str(runs_root)], None, None)
    assert runs is not None and O.jit_for(runs) == "c1"
    assert O.local_runs(["hdfs://nn/runs"], None, None) is None
    assert O.local_runs([str(runs_root)], "spark://h:7077", None) is None
    assert O.jit_for(None) is None
    monkeypatch.setattr(O, "SMALL_INPUT_BYTES", 10)
    assert O.jit_for(runs) is None
    monkeypatch.delenv(SS.JIT_ENV, raising=False)
    assert SS._jit_option("c1") == SS.C1_ONLY and SS._jit_option(None) is None
    monkeypatch.setenv(SS.JIT_ENV, "c2")
    assert SS._jit_option("c1") is None
    monkeypatch.setenv(SS.JIT_ENV, "c1")
    assert SS._jit_option(None) == SS.C1_ONLY


def _one_run(tmp_path, name: str):
    spec = PLANTED[name]
    write_run(tmp_path / "runs", name, spec["events"], spec.get("raw"), spec.get("scenario"))
    return tmp_path / "runs" / name


def _verdicts(out) -> list[dict]:
    import json

    docs = json.loads((out / "report" / "verdicts.json").read_text())
    for d in docs:
        d["meta"].pop("ingested_at")
    return docs


def _rows_without_stamp(spark, wh: str) -> dict:
    rows = _warehouse(spark, wh)
    rows["runs"] = sorted(
        repr({k: v for k, v in r.asDict(recursive=True).items() if k != "ingested_at"})
        for r in I.load_runs(spark, wh).collect()
    )
    return rows


@pytest.mark.parametrize("name", ["malformed", "missing"])
def test_analyze_of_one_run_draws_the_report_while_writing(spark, tmp_path, monkeypatch, name):
    """One run, judged on the driver: the command draws the report while the rows are written
    (the driver writes the run's partitions) and gives the warehouse rows, verdicts and report
    an analysis by the tasks alone gives (quarantined lines and a failing run among them)."""
    from splitbrain.harness.cli import main
    from splitbrain.pipeline import analysis as A

    run = _one_run(tmp_path, name)
    writing = I.Writing
    started = []
    monkeypatch.setattr(I, "Writing", lambda write: started.append(write) or writing(write))
    assert main(["analyze", str(run), "--out", str(tmp_path / "cli"), "--quiet"]) == (1 if name == "missing" else 0)
    assert len(started) == 1  # the writes ran in the background
    analysis = A.analyze(spark, [str(run)], str(tmp_path / "tasks" / "warehouse"))
    A.build_report(spark, analysis, str(tmp_path / "tasks" / "report"), title="t")
    assert _verdicts(tmp_path / "cli") == _verdicts(tmp_path / "tasks")
    cli_rows = _rows_without_stamp(spark, str(tmp_path / "cli" / "warehouse"))
    assert cli_rows == _rows_without_stamp(spark, str(tmp_path / "tasks" / "warehouse"))
    assert cli_rows["quarantine"] if name == "malformed" else cli_rows["events"]
    assert _writers(tmp_path / "cli" / "warehouse") == {"driver"}
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["report", "warehouse"]  # no staging left


def test_a_failed_write_leaves_no_report(spark, tmp_path, monkeypatch):
    """When the rows cannot be written the command fails with that error, after the report was
    drawn meanwhile: no report is published, no runs row committed, no staging left behind."""
    from splitbrain.harness.cli import main

    def broken(*args, **kw):
        raise OSError("warehouse disk full")

    monkeypatch.setattr(I, "_write_prejudged", broken)
    with pytest.raises(OSError, match="warehouse disk full"):
        main(["analyze", str(_one_run(tmp_path, "clean")), "--out", str(tmp_path / "out"), "--quiet"])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["warehouse"]
    assert not (tmp_path / "out" / "warehouse" / I.RUNS_DIR).exists()
