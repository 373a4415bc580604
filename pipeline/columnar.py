"""One run judged from its stored columns: harness.checks' one-pass checks (fifo, no_duplicates,
no_loss, windows_synced, no_errors) and views_agree as array operations over the run's Arrow
table, returning exactly the CheckResult.to_dict() dicts harness.checks.run_checks returns for the same events.

Theory of operation. Nearly every event of a run is a send, a delivery, an ack or a
retransmission, and what the checks do with those is keyed arithmetic: group deliveries by
stream and epoch and compare each app n with the running maximum (fifo), find repeated app ids
(no_duplicates), look every owed send up among the deliveries (no_loss), take the last time or
the last position per node or link (windows_synced), count (no_errors). That part is numpy over
dictionary codes of the string columns. The events that change a check's state in intricate ways
are few (lifecycles, conn_state, final windows, views, faults, errors: RARE_KINDS); they become
dicts and go through harness.checks' own classes (NoLoss's connectivity, WindowsSynced,
NoErrors, Lives) in log order, and the results are formed by harness.checks' own *_result
functions, so explanations and details are the harness's text by construction.

Run rows (node/events.py: one row for a batch's consecutive sends or deliveries) are judged as
ranges of app n (pipeline.columnar_apps): fifo compares a run's [n, last n] with the running
maximum of its stream, no_loss counts a send run's messages that the union of the link's
delivered ranges covers, no_errors and the delivery counts add `count`, windows_synced and
views_agree read the row as it is. Only where delivered ranges of one stream overlap (an app id
delivered again) are that stream's deliveries made into per-message arrays, for no_duplicates'
epochs and its walk of the redeliveries.

The run is walked in run_checks' order: the stored `seq` order, stably re-sorted by t when t is
not monotonic in it (harness.checks.events.ordered). Where a rule needs what the kernel does not
compute, `judge_table` says why and returns no results, and the caller judges that run with the
exact per-event path (pipeline.tasks): the bounded checks (resync_traffic, xmit_traffic),
multicast sends (no_loss' view and join-digest excuses) and an app id not in the nodes'
"origin:stream:n" form with canonical numbers.

The module stays one piece (a little over 600 lines): every kernel reads the same decoded run
(_Run, _Deliveries, _Messages) and the range arithmetic they share, and splitting the kernels
from those would only move private names across a module boundary.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splitbrain.harness import checks as H

from . import schema as S
from .columnar_apps import AppIds, app_at, dense, encoded, equals, expand, indices, message_counts, one_array

# run_checks' one-walk checks, and views_agree (which reads only rare events and who was seen).
KERNEL_CHECKS = ("fifo", "no_duplicates", "no_loss", "windows_synced", "no_errors", "views_agree")
# Kinds whose events go through harness.checks' classes as dicts (they are few per run).
RARE_KINDS = frozenset(("node_start", "node_stop", "conn_state", "window", "view", "fault_on", "fault_off", "error"))
_TRAFFIC = ("send", "deliver", "ack_tx", "ack_rx")

# Why runs went to the exact path, in this process (benchmarks and tests read it).
FALLBACKS: Counter[str] = Counter()


class _Strings:
    """One integer per distinct string over several columns (nodes, peers, origins: few)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def code(self, name: str) -> int:
        c = self.index.get(name)
        if c is None:
            c = self.index[name] = len(self.names)
            self.names.append(name)
        return c

    def codes(self, arr: pa.Array) -> np.ndarray:
        """The codes of a string column (plain or dictionary), -1 for null."""
        enc = encoded(arr)
        return self.coded(enc.dictionary, indices(enc))

    def coded(self, values: pa.Array, rows: np.ndarray) -> np.ndarray:
        """The codes of rows given as indices into distinct `values` (-1: null), new strings
        numbered in the order the rows first show them (as dictionary_encode of the rows would)."""
        seen = pc.unique(pa.array(rows[rows >= 0])).to_numpy()
        lookup = np.full(len(values) + 1, -1, dtype=np.int64)
        lookup[seen] = [self.code(s) for s in values.take(pa.array(seen)).to_pylist()]
        return lookup[rows]


def _bools(arr) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _is_identity(order: np.ndarray) -> bool:
    """Whether the rows are already in order (as ingest writes a run's events): no take needed."""
    return bool((order == np.arange(len(order))).all())


def _count_before(mark_keys: np.ndarray, mark_pos: np.ndarray, keys: np.ndarray, pos: np.ndarray, n: int):
    """For each (key, pos): how many marks with the same key lie at a position before pos."""
    if not len(mark_keys):
        return np.zeros(len(keys), dtype=np.int64)
    marks = np.sort(mark_keys * (n + 1) + mark_pos)
    base = keys * (n + 1)
    return np.searchsorted(marks, base + pos, "left") - np.searchsorted(marks, base, "left")


def _group_starts(*sorted_keys: np.ndarray) -> np.ndarray:
    """True where a run of equal keys begins, for keys already sorted together."""
    m = len(sorted_keys[0])
    new = np.zeros(m, dtype=bool)
    if m:
        new[0] = True
        for k in sorted_keys:
            new[1:] |= k[1:] != k[:-1]
    return new


def _running_max(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The running maximum of values within each run of equal (ascending) group numbers: over
    group * len + rank of the value, so that no group's values can exceed a later group's."""
    distinct, rank = np.unique(values, return_inverse=True)
    scaled = np.maximum.accumulate(groups * (len(values) + 1) + rank)
    return distinct[scaled % (len(values) + 1)]


def _last_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys, index of each one's last occurrence)."""
    u, first_rev = np.unique(keys[::-1], return_index=True)
    return u, len(keys) - 1 - first_rev


class _Run:
    """The columns of one run in run_checks' order, with the codes the checks share."""

    def __init__(self, table: pa.Table, order: np.ndarray, apps: AppIds) -> None:
        self.n = n = len(order)
        take = None if _is_identity(order) else pa.array(order)

        def col(name: str) -> pa.Array:
            if name not in table.column_names:
                return pa.nulls(n)
            column = one_array(table.column(name))
            return column if take is None else column.take(take)

        self.col = col
        self.t = one_array(table.column("t")).to_numpy()[order]
        kind = encoded(col("kind"))
        kinds = kind.dictionary.to_pylist()
        ki = kind.indices.to_numpy()
        self.kinds = kinds

        def is_kind(*names: str) -> np.ndarray:
            codes = [i for i, k in enumerate(kinds) if k in names]
            return np.isin(ki, codes)

        self.is_kind = is_kind
        self.send = is_kind("send")
        self.deliver = is_kind("deliver")
        self.rare = is_kind(*RARE_KINDS)
        self.strings = _Strings()
        self.node = self.strings.codes(col("node"))
        self.peer = self.strings.codes(col("peer"))
        self.harness = (self.node == self.strings.index.get(H.HARNESS, -2)) | equals(col("proto"), H.HARNESS)
        self.apps = apps
        self.app = apps.code if take is None else apps.code[order]
        self.has_app = self.app >= 0
        self.has_members = _bools(col("members").is_valid())
        # Per row: whether it is a run row, and how many messages it stands for (1 but for runs).
        self.is_run, self.count = message_counts(table, None if take is None else order)
        self.pos = np.arange(n, dtype=np.int64)
        # The few events harness.checks' classes take as dicts, in order (as tasks.stored_events builds them).
        self.table, self.order = table, order
        rare_idx = np.flatnonzero(self.rare)
        self.rare_events = list(zip(rare_idx.tolist(), self.events_at(rare_idx)))
        starts = [(p, ev["node"]) for p, ev in self.rare_events if ev["kind"] == "node_start"]
        self.start_pos = np.array([p for p, _ in starts], dtype=np.int64)
        self.start_node = np.array([self.strings.code(x) for _, x in starts], dtype=np.int64)

    def events_at(self, positions: np.ndarray) -> list[dict]:
        """The events at these positions as dicts (as tasks.stored_events builds them)."""
        fields = [f for f in S.FIELDS if f in self.table.column_names]
        rows = self.table.select(fields).take(pa.array(self.order[positions], type=pa.int64())).to_pylist()
        return [{k: v for k, v in r.items() if v is not None} for r in rows]

    def value(self, name: str, i: int) -> Any:
        return self.table.column(name)[int(self.order[i])].as_py()

    def app_of(self, i: int, offset: int = 0) -> str:
        """The app id of the message `offset` places into the row at position i."""
        return app_at(self.value("app", i), offset)

    def starts_before(self, nodes: np.ndarray, pos: np.ndarray) -> np.ndarray:
        return _count_before(self.start_node, self.start_pos, nodes, pos, self.n)

    def last_start(self) -> np.ndarray:
        """Per node code, the position of its last start (-1: none)."""
        out = np.full(len(self.strings.names), -1, dtype=np.int64)
        np.maximum.at(out, self.start_node, self.start_pos)
        return out

    def incarnation_at(self, node: str, pos: int) -> int:
        lives = H.Lives()
        for p, ev in self.rare_events:
            if p >= pos:
                break
            if ev["kind"] in H.LIFECYCLE:
                lives.observe(ev)
        return lives.incarnation_of(node)


def judge_table(
    table: pa.Table, names: list[str], bound: dict, apps: AppIds | None = None
) -> tuple[list[dict] | None, str | None]:
    """(results, None): run_checks' result dicts for one run's stored events (EVENTS_TABLE_SCHEMA
    columns, strings plain or as dictionaries; `bound` as pipeline.judging.bounds gives it; `apps`
    its app column's AppIds, shared with columnar_parts); or (None, why) when the run needs the
    exact per-event path."""
    why = _unsupported_checks(names)
    if why is None:
        why = _unorderable(table)
    if why is not None:
        FALLBACKS[why] += 1
        return None, why
    seq = one_array(table.column("seq")).to_numpy()
    order = np.argsort(seq, kind="stable")
    t = one_array(table.column("t")).to_numpy()[order]
    if len(t) > 1 and not np.all(t[:-1] <= t[1:]):
        order = order[np.argsort(t, kind="stable")]  # run_checks sorts by t, ties in log order
    run = _Run(table, order, apps if apps is not None else AppIds(table.column("app")))
    try:
        results = _judge(run, list(names), bound)
    except _Fallback as e:
        FALLBACKS[str(e)] += 1
        return None, str(e)
    return results, None


class _Fallback(Exception):
    """The run needs the exact path; the message says why."""


def _unsupported_checks(names) -> str | None:
    other = [n for n in names if n not in KERNEL_CHECKS]
    return f"checks the kernel does not compute: {', '.join(other)}" if other else None


def _unorderable(table: pa.Table) -> str | None:
    if table.num_rows == 0:
        return "no events"
    if table.column("seq").null_count or table.column("t").null_count:
        return "a null seq or t"
    if np.isnan(one_array(table.column("t")).to_numpy()).any():
        return "a NaN t"
    if table.column("kind").null_count or table.column("node").null_count or table.column("proto").null_count:
        return "a null kind, node or proto"
    return None


def _judge(run: _Run, names: list[str], bound: dict) -> list[dict]:
    if (run.send & run.has_app & (run.peer < 0) & run.has_members).any():
        raise _Fallback("multicast sends")
    bound_s = bound.get("recovery_bound_s")
    bound_s = H.DEFAULT_RECOVERY_BOUND_S if bound_s is None else bound_s
    d = _Deliveries(run) if {"fifo", "no_duplicates", "no_loss"} & set(names) else None
    out: dict[str, H.CheckResult] = {}
    if "no_duplicates" in names:
        assert d is not None
        out["no_duplicates"] = _no_duplicates(run, d)  # first: it may fall back
    if "fifo" in names:
        assert d is not None
        out["fifo"] = _fifo(run, d)
    if "no_loss" in names:
        assert d is not None
        out["no_loss"] = _no_loss(run, d, bound_s)
    if "windows_synced" in names:
        out["windows_synced"] = _windows_synced(run, bound.get("ack_bounds"))
    if "no_errors" in names:
        out["no_errors"] = _no_errors(run)
    if "views_agree" in names:
        out["views_agree"] = _views_agree(run)
    return [out[name].to_dict() for name in names]


class _Deliveries:
    """The deliveries with an app id, a row each (a run row is the range n .. n1 of its stream):
    receiver, sender, origin, stream, prefix (the stream as one code), n, n1, count, epoch."""

    def __init__(self, run: _Run) -> None:
        self.idx = idx = np.flatnonzero(run.deliver & run.has_app)
        apps = run.apps
        self.app = app = run.app[idx]
        if not apps.well_formed[app].all():
            raise _Fallback("an app id not in the nodes' form")
        self.receiver = run.node[idx]
        peer = run.peer[idx]
        self.origin = run.strings.coded(apps.origins, apps.origin[app])
        self.stream = apps.stream[app]
        self.prefix = apps.prefix[app]
        self.n = apps.n[app]
        self.count = run.count[idx]
        self.n1 = self.n + self.count - 1
        self.messages = int(self.count.sum())
        # fifo names the sender ev.get("peer", origin), the other checks peer-or-origin: they
        # differ on an empty peer.
        empty = run.strings.index.get("", -2)
        self.fifo_sender = np.where(peer >= 0, peer, self.origin)
        self.sender = np.where((peer >= 0) & (peer != empty), peer, self.origin)
        # The receiver's window for the sender is discarded by a (re)start of the receiver or a
        # receive window CLOSED for real: the epoch counts both (harness.checks.Redeliveries).
        discards = [
            (p, run.strings.code(ev["node"]), run.strings.code(ev["peer"]))
            for p, ev in run.rare_events
            if ev["kind"] == "conn_state" and "peer" in ev and H.discards_window(ev)
        ]
        ns = len(run.strings.names)
        starts = run.starts_before(self.receiver, idx) * (len(discards) + 1)
        marks = np.array([r * ns + s for _, r, s in discards], dtype=np.int64)
        marks_pos = np.array([p for p, _, _ in discards], dtype=np.int64)

        def epoch(sender: np.ndarray) -> np.ndarray:
            return starts + _count_before(marks, marks_pos, self.receiver * ns + sender, idx, run.n)

        self.fifo_epoch = epoch(self.fifo_sender)
        self.epoch = self.fifo_epoch if (self.sender == self.fifo_sender).all() else epoch(self.sender)
        # The unicast sends (no_loss looks their messages up among the deliveries).
        self.sends = s = np.flatnonzero(run.send & run.has_app & (run.peer >= 0))
        send_app = run.app[s]
        if not apps.well_formed[send_app[run.is_run[s]]].all():
            raise _Fallback("an app id not in the nodes' form")
        self.send_prefix = apps.prefix[send_app]  # -1: an app id no delivery can have
        self.send_n = apps.n[send_app]
        self.send_count = run.count[s]
        self.send_n1 = self.send_n + self.send_count - 1
        # Streams keyed with a link: link * streams + prefix + 1 (0: a send's id of another form).
        self.streams = int(max(self.prefix.max(initial=-1), self.send_prefix.max(initial=-1))) + 2


def _fifo(run: _Run, d: _Deliveries) -> H.CheckResult:
    """Per stream and epoch, a row's messages below the highest n delivered before it are out of
    order: for a run row [n, n1] after a highest h, the messages n .. min(n1, h - 1)."""
    order = np.lexsort((d.idx, d.fifo_epoch, d.stream, d.origin, d.fifo_sender, d.receiver))
    keys = [k[order] for k in (d.receiver, d.fifo_sender, d.origin, d.stream, d.fifo_epoch)]
    new = _group_starts(*keys)
    n0, n1 = d.n[order], d.n1[order]
    highest = _running_max(n1, np.cumsum(new) - 1)
    before = np.empty_like(highest)
    before[1:] = highest[:-1]
    late = np.where(new, 0, np.clip(np.minimum(n1, before - 1) - n0 + 1, 0, None))
    count = int(late.sum())
    violations: list[dict] = []
    for j in sorted(np.flatnonzero(late), key=lambda j: d.idx[order[j]]):
        i = order[j]
        p = int(d.idx[i])
        receiver, origin = run.strings.names[d.receiver[i]], run.strings.names[d.origin[i]]
        stream = int(d.stream[i])
        for offset in range(min(int(late[j]), H.FIRST_FEW - len(violations))):
            violations.append(
                {
                    "receiver": receiver,
                    "incarnation": run.incarnation_at(receiver, p),
                    "sender": run.strings.names[d.fifo_sender[i]],
                    "conn_id": run.value("conn_id", p),
                    "stream": stream,
                    "app": run.app_of(p, offset),
                    "after": f"{origin}:{stream}:{int(before[j])}",
                    "t": float(run.t[p]),
                }
            )
        if len(violations) >= H.FIRST_FEW:
            break
    return H.fifo_result(d.messages, count, violations)


class _Messages:
    """The messages of some delivery rows, one entry each (a run row's in order): its row in
    _Deliveries, position, n, receiver, sender, epoch and app id (a code per distinct id)."""

    def __init__(self, d: _Deliveries, rows: np.ndarray) -> None:
        self.row, offset = expand(rows, d.count)
        self.offset = offset
        self.idx = d.idx[self.row]
        self.n = d.n[self.row] + offset
        self.receiver = d.receiver[self.row]
        self.sender = d.sender[self.row]
        self.epoch = d.epoch[self.row]
        self.prefix = d.prefix[self.row]
        self.app = dense(self.prefix, self.n)


def _no_duplicates(run: _Run, d: _Deliveries) -> H.CheckResult:
    causes = dict.fromkeys(H.REDELIVERY_CAUSES, 0)
    # An app id delivered twice to a receiver from a sender lies in two delivered ranges of its
    # stream: where no two ranges of a (receiver, sender, stream) overlap, nothing came again.
    by = np.lexsort((d.idx, d.n, d.prefix, d.sender, d.receiver))
    stream_new = _group_starts(d.receiver[by], d.sender[by], d.prefix[by])
    stream_of = np.cumsum(stream_new) - 1
    reach = _running_max(d.n1[by], stream_of)
    overlaps = np.zeros(len(by), dtype=bool)
    overlaps[1:] = ~stream_new[1:] & (d.n[by][1:] <= reach[:-1])
    if not overlaps.any():
        return H.no_duplicates_result(d.messages, 0, [], causes)
    m = _Messages(d, np.sort(by[np.isin(stream_of, stream_of[overlaps])]))
    order = np.lexsort((m.idx, m.receiver, m.sender, m.app))
    new = _group_starts(m.app[order], m.sender[order], m.receiver[order])
    group = np.cumsum(new) - 1
    first = np.flatnonzero(new)[group]
    epoch = m.epoch[order]
    again = ~new
    # A repeat in the epoch of the first delivery is a duplicate. A key delivered again after a
    # discard is excused or not by whether the sender had seen it acked: those keys (rare) are
    # judged by harness.checks' own walk over their deliveries, sends and acks (_walk_redeliveries).
    crossing = np.zeros(len(order), dtype=bool)
    crossing_groups = np.unique(group[again & (epoch != epoch[first])])
    if len(crossing_groups):
        crossing = np.isin(group, crossing_groups)
    plain = again & ~crossing
    count = int(plain.sum())
    found: list[tuple[tuple[int, int], dict]] = []  # ((position, offset), record)
    for j in sorted(np.flatnonzero(plain), key=lambda j: (m.idx[order[j]], m.offset[order[j]]))[: H.FIRST_FEW]:
        i, f = order[j], order[first[j]]
        p = int(m.idx[i])
        receiver = run.strings.names[m.receiver[i]]
        record = {
            "receiver": receiver,
            "incarnation": run.incarnation_at(receiver, p),
            "sender": run.strings.names[m.sender[i]],
            "conn_id": run.value("conn_id", p),
            "app": run.app_of(p, int(m.offset[i])),
            "first_t": float(run.t[m.idx[f]]),
            "t": float(run.t[p]),
            "why": "no discard of its window in between",
        }
        found.append(((p, int(m.offset[i])), record))
    if crossing.any():
        more, walked, causes = _walk_redeliveries(run, d, m, order[crossing])
        count += more
        found += walked
    duplicates = [record for _p, record in sorted(found, key=lambda item: item[0])[: H.FIRST_FEW]]
    return H.no_duplicates_result(d.messages, count, duplicates, causes)


def _walk_redeliveries(run: _Run, d: _Deliveries, m: _Messages, sel: np.ndarray) -> tuple[int, list, dict]:
    """no_duplicates over the messages `sel` (indexes into m: every delivery of the keys that
    came again after a discard), walked by harness.checks' Redeliveries and NoDuplicates with
    what they read: the rare events, the sends and the acks of those links (a send run whole, as
    run_checks feeds it). Returns the duplicates' count, ((position, offset), record) of the
    first few, and the excused causes."""
    ns = len(run.strings.names)
    links = np.unique(m.sender[sel] * ns + m.receiver[sel])
    # The sends of those app ids: the send rows whose range holds one of them.
    streams = d.streams
    keys = (m.sender[sel] * ns + m.receiver[sel]) * streams + m.prefix[sel] + 1
    s = d.sends
    send_keys = (run.node[s] * ns + run.peer[s]) * streams + d.send_prefix + 1
    sends = s[_covered(keys, m.n[sel], m.n[sel], send_keys, d.send_n, d.send_n1)[0] > 0]
    acks = np.flatnonzero(run.is_kind("ack_rx") & np.isin(run.node * ns + run.peer, links) & (run.peer >= 0))
    rows = np.unique(np.concatenate([m.idx[sel], sends, acks]))
    events = dict(zip(rows.tolist(), run.events_at(rows)))
    # (position, what, offset): what 0 a delivered message, 1 a send (row), 2 an ack.
    hot = sorted(
        [(int(p), 0, int(o)) for p, o in zip(m.idx[sel], m.offset[sel])]
        + [(int(p), 1, 0) for p in sends]
        + [(int(p), 2, 0) for p in acks]
    )
    dups = H.NoDuplicates(H.CheckContext())
    walk = dups.walk
    found: list[tuple[tuple[int, int], dict]] = []
    i = 0
    rare = run.rare_events
    for p, what, offset in hot:
        while i < len(rare) and rare[i][0] < p:
            walk.see_other(rare[i][1])
            i += 1
        ev = events[p]
        if what == 0:
            if run.is_run[p]:
                ev = {"node": ev["node"], "t": ev["t"], "app": run.app_of(p, offset)} | {
                    k: ev[k] for k in ("peer", "conn_id") if k in ev
                }
            before = dups.count
            dups.see_deliver(ev)
            if dups.count > before and len(found) < H.FIRST_FEW:
                found.append(((p, offset), dups.duplicates[-1]))
        elif what == 1:
            walk.see_send_run(ev) if run.is_run[p] else walk.see_send(ev)
        else:
            walk.see_other(ev)
    return dups.count, found, dups.causes


def _covered(keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, qkeys: np.ndarray, qlo: np.ndarray, qhi: np.ndarray):
    """For each query (key, [qlo, qhi]): how many integers of it the union of the ranges [lo, hi]
    with that key holds; and the union itself (key, lo, hi), sorted, disjoint within a key."""
    if not len(keys):
        return np.zeros(len(qkeys), dtype=np.int64), (keys, lo, hi)
    o = np.lexsort((lo, keys))
    keys, lo, hi = keys[o], lo[o], hi[o]
    new_key = np.ones(len(keys), dtype=bool)
    new_key[1:] = keys[1:] != keys[:-1]
    reach = _running_max(hi, np.cumsum(new_key) - 1)
    starts = new_key.copy()
    starts[1:] |= lo[1:] > reach[:-1] + 1
    heads = np.flatnonzero(starts)
    u_key, u_lo, u_hi = keys[heads], lo[heads], np.maximum.reduceat(hi, heads)
    # Integers of the union at or below v in key k: the ranges of k before the one holding or
    # preceding v, whole, plus that one up to v. Keys and values as ranks, so (key, value) is one int.
    key_rank = dense(np.concatenate([u_key, qkeys]))
    values = np.concatenate([u_lo, qlo - 1, qhi])
    distinct, value_rank = np.unique(values, return_inverse=True)
    width = len(distinct) + 1
    u, nq = len(u_key), len(qkeys)
    sorted_union = key_rank[:u] * width + value_rank[:u]
    lengths = u_hi - u_lo + 1
    before = np.concatenate([[0], np.cumsum(lengths)])
    key_first = np.searchsorted(sorted_union, key_rank[:u] * width, "left")

    def upto(q_rank: np.ndarray, value: np.ndarray) -> np.ndarray:
        j = np.searchsorted(sorted_union, key_rank[u:] * width + q_rank, "right") - 1
        jj = np.maximum(j, 0)
        mine = (j >= 0) & (key_rank[:u][jj] == key_rank[u:])
        whole = before[jj] - before[key_first[jj]]
        return np.where(mine, whole + np.minimum(u_hi[jj], value) - u_lo[jj] + 1, 0)

    covered = upto(value_rank[u + nq :], qhi) - upto(value_rank[u : u + nq], qlo - 1)
    return covered, (u_key, u_lo, u_hi)


def _uncovered(union: tuple, key: int, lo: int, hi: int, limit: int) -> list[int]:
    """The first `limit` integers of [lo, hi] the union's ranges with `key` do not hold."""
    u_key, u_lo, u_hi = union
    a, b = np.searchsorted(u_key, key, "left"), np.searchsorted(u_key, key, "right")
    out: list[int] = []
    n = lo
    for x, y in zip(u_lo[a:b].tolist(), u_hi[a:b].tolist()):
        if y < n:
            continue
        while n < min(x, hi + 1) and len(out) < limit:
            out.append(n)
            n += 1
        if len(out) >= limit or x > hi:
            return out
        n = max(n, y + 1)
    while n <= hi and len(out) < limit:
        out.append(n)
        n += 1
    return out


def _no_loss(run: _Run, d: _Deliveries, bound_s: float) -> H.CheckResult:
    loss = H.NoLoss(H.CheckContext(recovery_bound_s=bound_s))
    for _p, ev in run.rare_events:
        loss.see_other(ev)
    conn = loss.conn
    # Every other event names a node that was up (Connectivity.observe, NoLoss.see_send/see_deliver).
    others = ~run.rare & (run.node != run.strings.index.get(H.HARNESS, -2))
    conn.nodes.update(run.strings.names[c] for c in np.unique(run.node[others]))
    conn.close()
    ns = len(run.strings.names)
    s = d.sends
    sender, receiver = run.node[s], run.peer[s]
    life = run.starts_before(sender, s)
    link = sender * ns + receiver
    lives = run.n + 1  # a life counts starts, so it is below this
    combos, inverse = np.unique(link * lives + life, return_inverse=True)
    owed_until = np.empty(len(combos))
    for k, c in enumerate(combos):
        lk, lf = divmod(int(c), lives)
        x, y = divmod(lk, ns)
        owed_until[k] = conn.owed_until(run.strings.names[x], run.strings.names[y], bound_s).get(lf, float("-inf"))
    t = run.t[s]
    excused_mask = t > owed_until[inverse]
    excused = dict.fromkeys(H.EXCUSES, 0)
    weights = np.bincount(inverse[excused_mask], weights=d.send_count[excused_mask], minlength=len(combos))
    for k, count in enumerate(weights.astype(np.int64)):
        if count:
            lk, lf = divmod(int(combos[k]), lives)
            x, y = divmod(lk, ns)
            excused[conn.excuse(run.strings.names[x], run.strings.names[y], lf)] += int(count)
    # A send row's messages that arrived: those the union of the link's delivered ranges of its
    # stream holds (a send whose app id is not in the nodes' form: none, prefix -1).
    dlink = d.sender * ns + d.receiver
    streams, send_n1 = d.streams, d.send_n1
    arrived, union = _covered(
        dlink * streams + d.prefix + 1, d.n, d.n1, link * streams + d.send_prefix + 1, d.send_n, send_n1
    )
    lost_rows = np.where(excused_mask, 0, d.send_count - arrived)
    lost: dict[str, dict] = {}
    if lost_rows.any():
        links, first_send = np.unique(link, return_index=True)
        lossy = set(np.unique(link[lost_rows > 0]).tolist())
        for lk in [int(x) for _, x in sorted(zip(first_send, links)) if int(x) in lossy]:
            on_link = np.flatnonzero((lost_rows > 0) & (link == lk))
            first: list[str] = []
            for i in on_link.tolist():
                if len(first) >= H.LOST_IDS_SHOWN:
                    break
                p = int(s[i])
                key = lk * streams + int(d.send_prefix[i]) + 1
                n0 = int(d.send_n[i])
                missing = _uncovered(union, key, n0, int(send_n1[i]), H.LOST_IDS_SHOWN - len(first))
                first += [run.app_of(p, n - n0) for n in missing]
            delivered_on_link = np.flatnonzero(dlink == lk)
            x, y = divmod(lk, ns)
            lost[H.link_name(run.strings.names[x], run.strings.names[y])] = {
                "count": int(lost_rows[on_link].sum()),
                "first": first,
                "last_deliver_t": float(run.t[d.idx[delivered_on_link[-1]]]) if len(delivered_on_link) else None,
            }
    last_deliver = float(run.t[d.idx[-1]]) if len(d.idx) else None
    return H.no_loss_result(int(d.send_count.sum()), excused, last_deliver, lost, bound_s)


def _windows_synced(run: _Run, ack_bounds: dict | None = None) -> H.CheckResult:
    ws = H.WindowsSynced(H.CheckContext(ack_bounds=ack_bounds or {}))
    for _p, ev in run.rare_events:
        ws.see_other(ev)
    names, ns = run.strings.names, len(run.strings.names)
    # What the sends, deliveries and acks add, as WindowsSynced's see_send, see_deliver and
    # see_other would: traffic and sends count only after the node's last start.
    after_start = run.pos > run.last_start()[run.node]
    traffic = run.is_kind(*_TRAFFIC) & ~run.rare & after_start
    ws.traffic_since_start.update(names[c] for c in np.unique(run.node[traffic]))
    to_peer = run.send & (run.peer >= 0) & after_start
    for key in np.unique(run.node[to_peer] * ns + run.peer[to_peer]):
        ws.sent_since_start.add((names[key // ns], names[key % ns]))
    multicast = run.send & (run.peer < 0) & run.has_members & after_start
    ws.multicast_since_start.update(names[c] for c in np.unique(run.node[multicast]))
    # The last send per link and the last multicast per node, whenever (see_send's last_send).
    for mask, per_link in ((run.send & (run.peer >= 0), True), (run.send & (run.peer < 0) & run.has_members, False)):
        idx = np.flatnonzero(mask)
        keys, last = _last_by_key(run.node[idx] * ns + run.peer[idx] if per_link else run.node[idx])
        for key, i in zip(keys.tolist(), last.tolist()):
            where = (names[key // ns], names[key % ns]) if per_link else (names[key], None)
            ws.last_send[where] = float(run.t[idx[i]])
    for mask, table, flip in (
        (run.deliver & (run.peer >= 0), ws.last_deliver, True),
        (run.is_kind("ack_rx") & (run.peer >= 0) & ~run.rare, ws.last_ack_rx, False),
    ):
        idx = np.flatnonzero(mask)
        keys, last = _last_by_key(run.node[idx] * ns + run.peer[idx])
        for key, i in zip(keys.tolist(), last.tolist()):
            node, peer = names[key // ns], names[key % ns]
            table[(peer, node) if flip else (node, peer)] = float(run.t[idx[i]])
    return ws.result()


def _views_agree(run: _Run) -> H.CheckResult:
    """check_views_agree itself over the rare events and each node's first other event: every
    other event only tells it that its node exists."""
    others = np.flatnonzero(~run.rare & ~run.harness)
    _nodes, first = np.unique(run.node[others], return_index=True)
    firsts = others[first]
    rows = list(zip(firsts.tolist(), run.events_at(firsts)))
    return H.check_views_agree([ev for _p, ev in sorted(run.rare_events + rows, key=lambda item: item[0])])


def _no_errors(run: _Run) -> H.CheckResult:
    errors = H.NoErrors(H.CheckContext())
    for _p, ev in run.rare_events:
        errors.see_other(ev)
    errors.judged += int(run.count[~run.rare & ~run.harness].sum())
    return errors.result()
