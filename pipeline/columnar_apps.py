"""The string columns of one run as dictionary codes, its app ids split once, and its run rows'
messages, for both kernels (pipeline.columnar and pipeline.columnar_parts).

Theory of operation. A run's string columns repeat few values (nodes, peers, kinds) or each value
about twice (an app id is sent once and delivered once). The local warehouse is read with Parquet's
own dictionaries (pipeline.stored), so a column arrives as codes into its distinct values; a plain
column (Spark's Arrow batches, tests) is dictionary-encoded here. Whatever depends on the text
alone (the nodes' app id form, its origin, stream and n) is computed once per distinct value, and
per row there is only a code to look up. A dictionary with repeated or null values (Parquet does
not forbid one) is encoded again, so that equal codes mean equal strings and the other way round.

A run row (node/events.py: "v" 2) stands for `count` messages with consecutive seqnos and app ids
"S:K:n" .. "S:K:n+count-1"; its app column holds the first. The kernels judge it as the range
[n, n + count - 1] of its stream (`prefix` codes "S:K") where a range serves, and where a rule is
per message (a metric's latency, a redelivered app id) make its messages as integer arrays
(`expand`: the row and the offset of each message), never as rows or Python objects.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .schema import RUN_VERSION

# The end of the app ids nodes write, ":stream:n" (so its colons are the last two, where
# parse_app_id splits); a number with a sign, leading zeros or over 18 digits falls back.
APP_END = r":(0|[1-9][0-9]{0,17}):(0|[1-9][0-9]{0,17})$"


def one_array(column) -> pa.Array:
    """A column as one array: its only chunk as it is (combine_chunks would copy it)."""
    if not isinstance(column, pa.ChunkedArray):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def encoded(column) -> pa.DictionaryArray:
    """A string column (array or chunked, plain or dictionary) as one dictionary array whose
    dictionary holds each value once and no null."""
    arr = one_array(column)
    if not pa.types.is_dictionary(arr.type):
        return arr.dictionary_encode()
    values = arr.dictionary
    if values.null_count or len(pc.unique(values)) != len(values):
        return arr.cast(values.type).dictionary_encode()
    return arr


def indices(enc: pa.DictionaryArray) -> np.ndarray:
    """The rows' codes as int64, -1 for null."""
    return np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


def equals(column, value: str) -> np.ndarray:
    """Which rows hold `value` (null: no); compared per distinct value for a dictionary column."""
    if not pa.types.is_dictionary(column.type):
        return np.asarray(pc.fill_null(pc.equal(column, value), False).to_numpy(zero_copy_only=False), dtype=bool)
    enc = encoded(column)
    hit = np.asarray(pc.equal(enc.dictionary, value).to_numpy(zero_copy_only=False), dtype=bool)
    return np.append(hit, False)[indices(enc)]


class AppIds:
    """A run's app column in stored row order: `code` per row (-1: none; equal codes, equal ids)
    and, per code, whether the id has the nodes' form, its origin (a code into `origins`, for every
    id, as split at its last two colons) and its stream and n (0 where not in the form)."""

    def __init__(self, column) -> None:
        enc = encoded(column)
        values = enc.dictionary
        self.code = indices(enc)
        self.n_values = len(values)
        self.well_formed = np.asarray(
            pc.match_substring_regex(values, APP_END).to_numpy(zero_copy_only=False), dtype=bool
        )
        parts = pc.split_pattern(values, ":", max_splits=2, reverse=True)
        origin = pc.list_element(parts, 0).dictionary_encode()
        self.origins = origin.dictionary
        self.origin = indices(origin)
        self.stream = np.zeros(len(values), dtype=np.int64)
        self.n = np.zeros(len(values), dtype=np.int64)
        ok = np.flatnonzero(self.well_formed)
        if len(ok):
            numbers = parts.take(pa.array(ok))
            self.stream[ok] = pc.cast(pc.list_element(numbers, 1), pa.int64()).to_numpy()
            self.n[ok] = pc.cast(pc.list_element(numbers, 2), pa.int64()).to_numpy()
        # Per code, its stream "S:K" as a code (-1 where not in the form): one stream, one code.
        self.prefix = np.full(len(values), -1, dtype=np.int64)
        if len(ok):
            self.prefix[ok] = dense(self.origin[ok], self.stream[ok])


def dense(*keys: np.ndarray) -> np.ndarray:
    """One code per distinct tuple of the keys (0, 1, ... in the tuples' sort order)."""
    if not len(keys[0]):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys[::-1])
    new = np.zeros(len(order), dtype=bool)
    new[0] = True
    for k in keys:
        sorted_k = k[order]
        new[1:] |= sorted_k[1:] != sorted_k[:-1]
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.cumsum(new) - 1
    return out


def message_counts(table: pa.Table, order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(whether each row is a run row, how many messages it stands for: a run row's count, any
    other row 1), in `order` when given. A version-1 row's own `count` (an XMIT-REQ's seqnos, a
    drop aggregate) is no number of messages."""
    n = table.num_rows
    if "v" not in table.column_names or "count" not in table.column_names:
        return np.zeros(n, dtype=bool), np.ones(n, dtype=np.int64)
    v = one_array(table.column("v"))
    is_run = np.asarray(pc.fill_null(pc.equal(v, RUN_VERSION), False).to_numpy(zero_copy_only=False), dtype=bool)
    if order is not None:
        is_run = is_run[order]
    if not is_run.any():
        return is_run, np.ones(n, dtype=np.int64)
    counts = one_array(table.column("count")).fill_null(1).to_numpy()
    if order is not None:
        counts = counts[order]
    return is_run, np.where(is_run, counts, 1).astype(np.int64)


def expand(rows: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The messages of `rows` (indexes) whose message counts are `counts` (per row of the whole
    table): (the row of each message, its offset in its row), rows in the given order."""
    reps = counts[rows]
    row_of = np.repeat(rows, reps)
    starts = np.cumsum(reps) - reps
    return row_of, np.arange(len(row_of), dtype=np.int64) - np.repeat(starts, reps)


def app_at(first_app: str, offset: int) -> str:
    """The app id of the message `offset` places after `first_app` ("S:K:n") in its run."""
    if not offset:
        return first_app
    prefix, _, n = first_app.rpartition(":")
    return f"{prefix}:{int(n) + offset}"
