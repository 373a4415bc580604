"""One run's partition of a local warehouse table, written by the driver with pyarrow.

Theory of operation. A run the driver judged itself (pipeline.overlap) already has its rows as
an Arrow table. Handing them to the JVM to write cost the one-run analysis its longest serial
step: 258 k events took 6-11 s of JVM CPU (Arrow to rows, sort, Parquet encoding with C1-only
code) against about 1 s for pyarrow. So where the warehouse is a local directory, the driver
writes that partition itself, as Spark's writer lays it out: `<table>/run_id=<run>/part-*.parquet`
with the table's columns but `run_id`, one file per run. Spark reads it back with the table's
explicit schema, so the rows are the same; the files differ only as Parquet writers do (writer
metadata, encodings).

A campaign's tasks (pipeline.campaign) write their seeds' partitions the same way: there the
JVM's sort and Parquet encoding of every event held the tasks' Python up.

Spark's dynamic partition overwrite is kept: the file is written under a hidden name (readers
skip names starting with "."), the partition's old files are removed, then the new one is renamed
into place. A run whose runs row was not written yet is not in the warehouse (the runs row is the
commit), so a crash between these steps is repaired by the next ingest, as before. A run id that
Spark would escape in a path is left to Spark's writer (`local_partition` returns None).
"""

from __future__ import annotations

import os
import re
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

# Run ids Spark's writer puts into a directory name unchanged (it escapes %, =, :, /, quotes,
# control characters, ...); names starting with "." or "_" would be hidden from readers.
_PLAIN_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
# Spark's own choice for Parquet (spark.sql.parquet.compression.codec).
COMPRESSION = "snappy"


def local_partition(table_dir: str | None, run_id: str) -> str | None:
    """The directory of `run_id`'s partition under a local table directory, or None where the
    driver does not write it (no local table, or a run id Spark would escape)."""
    if table_dir is None or not _PLAIN_RUN_ID.match(run_id):
        return None
    return os.path.join(table_dir, f"run_id={run_id}")


def replace_partition(partition_dir: str, table: pa.Table) -> None:
    """Make `table` (the partition's rows, without run_id) the partition's only file; a table
    without rows leaves the partition as it is, as Spark's dynamic overwrite does."""
    if table.num_rows == 0:
        return
    parent = os.path.dirname(partition_dir)
    os.makedirs(parent, exist_ok=True)
    name = f"part-00000-{uuid.uuid4()}.c000.{COMPRESSION}.parquet"
    hidden = os.path.join(parent, f".{name}.inprogress")
    try:
        pq.write_table(table, hidden, compression=COMPRESSION)
        os.makedirs(partition_dir, exist_ok=True)
        for old in os.listdir(partition_dir):
            os.remove(os.path.join(partition_dir, old))
        os.replace(hidden, os.path.join(partition_dir, name))
    finally:
        if os.path.exists(hidden):
            os.remove(hidden)
