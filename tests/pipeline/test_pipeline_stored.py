"""Judging a local warehouse's runs from their own Parquet files (pipeline.stored): the files are
found as Spark finds them, read as Spark reads them with the events schema, and every run's result
document is the one Spark's read and group-by gives (pipeline.analysis' other path)."""

from __future__ import annotations

import json
import random
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario
from splitbrain.pipeline import stored as ST
from splitbrain.pipeline import tasks as TK
from tests.pipeline.test_pipeline_checks import PLANTED, random_log, write_run
from tests.pipeline.test_pipeline_columnar import BOUND, CHECKS, SCENARIOS, files_of, stored


def write_partition(directory, table: pa.Table) -> None:
    """A run's stored table as Spark's partitioned write leaves it: run_id in the path only,
    a marker and a checksum file beside the data."""
    directory.mkdir(parents=True)
    pq.write_table(table.drop_columns(["run_id"]), directory / "part-00000.parquet")
    (directory / "_SUCCESS").write_text("")
    (directory / ".part-00000.parquet.crc").write_bytes(b"not parquet")


def test_partition_names_are_read_back_as_spark_escapes_them():
    """A run id with characters Spark escapes in partition directories comes back unchanged."""
    assert ST.unescape_partition("a%3Ab%20c%25d") == "a:b c%d"
    assert ST.unescape_partition("plain-1") == "plain-1"
    assert ST.unescape_partition("odd%zz") == "odd%zz"


def test_runs_are_dealt_largest_first_to_the_least_loaded_task():
    """Four runs on two tasks: the biggest alone, the three others together."""
    runs = [ST.StoredRun(f"r{i}", (), (), size) for i, size in enumerate((10, 3, 4, 2))]
    assert [[r.run_id for r in b] for b in ST.deal(runs, 2)] == [["r0"], ["r2", "r1", "r3"]]
    assert len(ST.deal(runs[:1], 8)) == 1
    assert ST.deal([], 4) == []


def test_listing_skips_markers_and_reading_fills_missing_columns(tmp_path):
    """Only data files are read, a column no file has is null, and the types are the schema's."""
    table = stored(files_of(PLANTED["clean"]["events"]))
    write_partition(tmp_path / "events" / "run_id=a%3Ab", table.select(["run_id", "seq", "t", "kind"]))
    (run,) = ST.list_runs(str(tmp_path), ["a:b"])
    assert [p.rsplit("/", 1)[1] for p in run.events] == ["part-00000.parquet"] and run.quarantine == ()
    got = ST.read_events(run.events, ST.JUDGED_COLUMNS)
    assert got.column_names == list(ST.JUDGED_COLUMNS)
    assert got.num_rows == table.num_rows and got.column("node").null_count == table.num_rows
    assert sorted(got.column("seq").to_pylist()) == sorted(table.column("seq").to_pylist())
    assert got.schema.field("members").type == pa.list_(pa.string())
    (missing,) = ST.list_runs(str(tmp_path), ["absent"])
    assert missing.events == () and ST.read_events(missing.events).num_rows == 0


def multicast_table(tmp_path) -> pa.Table:
    """A simulator run of the multicast scenario: its sends make the kernels decline."""
    path = next(p for p in SCENARIOS if p.stem == "mcast-loss")
    run_dir = run_scenario(load_scenario(path), backend="sim", out=tmp_path / "sim").run_dir
    files = sorted(
        (str(p.relative_to(run_dir)), p.read_text(encoding="utf-8"))
        for p in [*run_dir.glob("nodes/*/events.jsonl"), *run_dir.glob("timeline.jsonl")]
    )
    return stored(files, run_id="mcast")


@pytest.mark.slow
@pytest.mark.parametrize("timeline", [False, True])
def test_a_run_read_from_its_files_gets_the_spark_tasks_document(tmp_path, timeline):
    """Failing, stuck, clean and multicast runs (the exact path, which needs every column), with
    and without a timeline, with quarantined lines: the document of the task over Spark's group."""
    tables = {name: stored(files_of(PLANTED[name]["events"]), run_id=name) for name in ("missing", "stuck", "clean")}
    tables["mcast"] = multicast_table(tmp_path)
    for name, table in tables.items():
        write_partition(tmp_path / "events" / f"run_id={name}", table)
    bad = pa.table({"src": ["nodes/B/events.jsonl"] * 3, "line": [1, 2, 3]})
    write_partition(tmp_path / "quarantine" / "run_id=stuck", bad.append_column("run_id", pa.array(["stuck"] * 3)))
    plans = {name: (CHECKS, BOUND, timeline) for name in tables}
    quarantined = {"stuck": 3}
    for run in ST.list_runs(str(tmp_path), sorted(tables)):
        doc = ST.judge_run(run, plans[run.run_id])
        spark_task = TK.judge_function(plans, quarantined)(tables[run.run_id])
        assert doc == spark_task.column("result")[0].as_py(), run.run_id
        assert json.loads(doc)["quarantined"] == quarantined.get(run.run_id, 0)


@pytest.mark.timeout(900)  # a Spark session and a few jobs; the shared machine can be very busy
def test_spark_judges_a_local_warehouse_as_through_its_own_read(spark, tmp_path):
    """In Spark: runs judged from a local warehouse's files (pipeline.stored) get exactly the
    result documents of Spark's read and group-by (the same warehouse as a file: URI), including
    a run id Spark escapes, quarantined lines, a run with no valid event and a multicast run."""
    from splitbrain.pipeline import analysis as A

    root = tmp_path / "runs"
    for name in ("missing", "stuck", "malformed", "empty", "bound_from_scenario"):
        spec = PLANTED[name]
        write_run(root, name, spec["events"], spec.get("raw"), spec.get("scenario"))
    write_run(root, "odd id: 50%", random_log(random.Random(7)))
    write_run(root, "only-bad", [], raw_lines={"B": ["not an event"]})
    sim = run_scenario(load_scenario(next(p for p in SCENARIOS if p.stem == "mcast-loss")), backend="sim", out=root)
    warehouse = str(tmp_path / "warehouse")
    first = A.analyze(spark, [str(root)], warehouse)
    ids = [v.run_id for v in first.verdicts]
    assert "odd id: 50%" in ids and sim.run_dir.name in ids
    shutil.rmtree(root)  # judged from the warehouse alone
    metas, docs = A.judge_stored(spark, warehouse, ids)
    spark_metas, spark_docs = A.judge_stored(spark, "file:" + warehouse, ids)
    assert metas == spark_metas
    assert {r: json.dumps(d) for r, d in docs.items()} == {r: json.dumps(d) for r, d in spark_docs.items()}
    assert docs["malformed"]["quarantined"] == 2 and docs["only-bad"]["quarantined"] == 1
    assert docs["only-bad"]["events"] == 0 and docs["missing"]["events"] > 0
