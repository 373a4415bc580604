"""pipeline.partition_write: a run's partition written by the driver replaces the old one whole,
leaves nothing half written behind, and is only written where Spark would name it the same."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from splitbrain.pipeline import partition_write as PW


def _table(values: list[int]) -> pa.Table:
    return pa.table({"seq": pa.array(values, pa.int64()), "kind": pa.array([f"k{v}" for v in values])})


def _files(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_a_partition_is_replaced_whole(tmp_path):
    """A second write of a run's partition leaves only its own file (Spark's .crc files and the
    old data file gone), readable with the rows written, and nothing hidden next to it."""
    part = PW.local_partition(str(tmp_path / "events"), "speed-5x60-1-20261127T210336")
    PW.replace_partition(part, _table([1, 2, 3]))
    (tmp_path / "events" / "run_id=speed-5x60-1-20261127T210336" / ".part-0.crc").write_bytes(b"x")
    PW.replace_partition(part, _table([7, 8]))
    files = _files(part)
    assert len(files) == 1 and files[0].startswith("part-00000-") and files[0].endswith(".snappy.parquet")
    assert pq.read_table(os.path.join(part, files[0])).to_pydict() == {"seq": [7, 8], "kind": ["k7", "k8"]}
    assert _files(tmp_path / "events") == ["run_id=speed-5x60-1-20261127T210336"]


def test_a_table_without_rows_leaves_the_partition(tmp_path):
    """No rows: the old partition stays, as Spark's dynamic overwrite leaves a partition it
    writes no row to; no directory is made for a new one."""
    part = PW.local_partition(str(tmp_path / "t"), "r1")
    PW.replace_partition(part, _table([1]))
    before = _files(part)
    PW.replace_partition(part, _table([]))
    assert _files(part) == before
    PW.replace_partition(PW.local_partition(str(tmp_path / "t"), "r2"), _table([]))
    assert _files(tmp_path / "t") == ["run_id=r1"]


def test_a_failed_write_keeps_the_old_partition(tmp_path, monkeypatch):
    """A write that fails half way keeps the partition's old file and removes its hidden one."""
    part = PW.local_partition(str(tmp_path / "t"), "r1")
    PW.replace_partition(part, _table([1]))
    before = _files(part)

    def torn(table, where, **kw):
        with open(where, "wb") as out:
            out.write(b"PAR1 torn")
        raise OSError("disk full")

    monkeypatch.setattr(PW.pq, "write_table", torn)
    with pytest.raises(OSError, match="disk full"):
        PW.replace_partition(part, _table([2]))
    assert _files(part) == before
    assert _files(tmp_path / "t") == ["run_id=r1"]


@pytest.mark.parametrize("run_id", ["a%20b", "a:b", "a=b", "a/b", ".hidden", "_hidden", "a b", "ä"])
def test_run_ids_that_are_not_plain_names_are_left_to_spark(run_id):
    """Spark escapes some of these in a partition directory's name, readers skip others: the
    driver writes only plain names, which Spark keeps as they are."""
    assert PW.local_partition("/wh/events", run_id) is None


def test_only_a_local_table_is_written_by_the_driver():
    assert PW.local_partition(None, "r1") is None
    assert PW.local_partition("/wh/events", "smoke-7-20261127T000000") == "/wh/events/run_id=smoke-7-20261127T000000"
