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

The run is walked in run_checks' order: the stored `seq` order, stably re-sorted by t when t is
not monotonic in it (harness.checks.events.ordered). Where a rule needs what the kernel does not
compute, `judge_table` says why and returns no results, and the caller judges that run with the
exact per-event path (pipeline.tasks): the bounded checks (resync_traffic, xmit_traffic),
run lines (one row for a run of messages, node/events.py: the exact path's checks read them as
they are), multicast sends (no_loss' view and join-digest excuses) and an app id not in the nodes'
"origin:stream:n" form with canonical numbers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splitbrain.harness import checks as H

from . import schema as S
from .columnar_apps import AppIds, encoded, equals, indices, one_array

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
    if why is None:
        why = _has_run_lines(table)
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


def _has_run_lines(table: pa.Table) -> str | None:
    """Run lines (node/events.py) go to the exact path, whose checks read them as they are."""
    if "v" in table.column_names and pc.any(pc.equal(table.column("v"), S.RUN_VERSION)).as_py():
        return "run lines"
    return None


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
    """The deliveries with an app id: receiver, sender, origin, stream, n, epoch, app code."""

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
        self.n = apps.n[app]
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
        # The unicast sends, with the same app codes (no_loss looks the ones up in the others).
        self.sends = np.flatnonzero(run.send & run.has_app & (run.peer >= 0))
        self.n_apps = apps.n_values
        self.send_app = run.app[self.sends]


def _fifo(run: _Run, d: _Deliveries) -> H.CheckResult:
    order = np.lexsort((d.idx, d.fifo_epoch, d.stream, d.origin, d.fifo_sender, d.receiver))
    keys = [k[order] for k in (d.receiver, d.fifo_sender, d.origin, d.stream, d.fifo_epoch)]
    new = _group_starts(*keys)
    n = d.n[order]
    highest = _running_max(n, np.cumsum(new) - 1)
    before = np.empty_like(highest)
    before[1:] = highest[:-1]
    bad = ~new & (n < before)
    count = int(bad.sum())
    violations = []
    for j in sorted(np.flatnonzero(bad), key=lambda j: d.idx[order[j]])[: H.FIRST_FEW]:
        i = order[j]
        p = int(d.idx[i])
        receiver, origin = run.strings.names[d.receiver[i]], run.strings.names[d.origin[i]]
        stream = int(d.stream[i])
        violations.append(
            {
                "receiver": receiver,
                "incarnation": run.incarnation_at(receiver, p),
                "sender": run.strings.names[d.fifo_sender[i]],
                "conn_id": run.value("conn_id", p),
                "stream": stream,
                "app": run.value("app", p),
                "after": f"{origin}:{stream}:{int(before[j])}",
                "t": float(run.t[p]),
            }
        )
    return H.fifo_result(len(d.idx), count, violations)


def _no_duplicates(run: _Run, d: _Deliveries) -> H.CheckResult:
    order = np.lexsort((d.idx, d.receiver, d.sender, d.app))
    new = _group_starts(d.app[order], d.sender[order], d.receiver[order])
    group = np.cumsum(new) - 1
    first = np.flatnonzero(new)[group]
    epoch = d.epoch[order]
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
    found: list[tuple[int, dict]] = []  # (position, record)
    for j in sorted(np.flatnonzero(plain), key=lambda j: d.idx[order[j]])[: H.FIRST_FEW]:
        i, f = order[j], order[first[j]]
        p = int(d.idx[i])
        receiver = run.strings.names[d.receiver[i]]
        record = {
            "receiver": receiver,
            "incarnation": run.incarnation_at(receiver, p),
            "sender": run.strings.names[d.sender[i]],
            "conn_id": run.value("conn_id", p),
            "app": run.value("app", p),
            "first_t": float(run.t[d.idx[f]]),
            "t": float(run.t[p]),
            "why": "no discard of its window in between",
        }
        found.append((p, record))
    causes = dict.fromkeys(H.REDELIVERY_CAUSES, 0)
    if crossing.any():
        more, walked, walked_causes = _walk_redeliveries(run, d, order[crossing])
        count += more
        found += walked
        causes = walked_causes
    duplicates = [record for _p, record in sorted(found, key=lambda item: item[0])[: H.FIRST_FEW]]
    return H.no_duplicates_result(len(d.idx), count, duplicates, causes)


def _walk_redeliveries(run: _Run, d: _Deliveries, rows: np.ndarray) -> tuple[int, list, dict]:
    """no_duplicates over the deliveries `rows` (indexes into d: every delivery of the keys that
    came again after a discard), walked by harness.checks' Redeliveries and NoDuplicates with
    what they read: the rare events, the sends of those keys and the acks of their links.
    Returns the duplicates' count, (position, record) of the first few, and the excused causes."""
    ns = len(run.strings.names)
    links = np.unique(d.sender[rows] * ns + d.receiver[rows])
    keys = np.unique((d.sender[rows] * ns + d.receiver[rows]) * d.n_apps + d.app[rows])
    s = d.sends
    sends = s[np.isin((run.node[s] * ns + run.peer[s]) * d.n_apps + d.send_app, keys)]
    acks = np.flatnonzero(run.is_kind("ack_rx") & np.isin(run.node * ns + run.peer, links) & (run.peer >= 0))
    positions = np.concatenate([d.idx[rows], sends, acks])
    kinds = np.concatenate([np.zeros(len(rows)), np.ones(len(sends)), np.full(len(acks), 2)])
    dups = H.NoDuplicates(H.CheckContext())
    walk = dups.walk
    picked = np.argsort(positions, kind="stable")
    events = dict(zip(positions[picked].tolist(), run.events_at(positions[picked])))
    hot = sorted(zip(positions.tolist(), kinds.tolist()))
    found: list[tuple[int, dict]] = []
    i = 0
    rare = run.rare_events
    for p, what in hot:
        while i < len(rare) and rare[i][0] < p:
            walk.see_other(rare[i][1])
            i += 1
        ev = events[p]
        if what == 0:
            before = dups.count
            dups.see_deliver(ev)
            if dups.count > before and len(found) < H.FIRST_FEW:
                found.append((p, dups.duplicates[-1]))
        elif what == 1:
            walk.see_send(ev)
        else:
            walk.see_other(ev)
    return dups.count, found, dups.causes


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
    for k, count in enumerate(np.bincount(inverse[excused_mask], minlength=len(combos))):
        if count:
            lk, lf = divmod(int(combos[k]), lives)
            x, y = divmod(lk, ns)
            excused[conn.excuse(run.strings.names[x], run.strings.names[y], lf)] += int(count)
    dlink = d.sender * ns + d.receiver
    arrived = np.isin(link * d.n_apps + d.send_app, dlink * d.n_apps + d.app)
    lost_mask = ~excused_mask & ~arrived
    lost: dict[str, dict] = {}
    if lost_mask.any():
        links, first_send = np.unique(link, return_index=True)
        lossy = set(np.unique(link[lost_mask]).tolist())
        for lk in [int(x) for _, x in sorted(zip(first_send, links)) if int(x) in lossy]:
            on_link = np.flatnonzero(lost_mask & (link == lk))
            delivered_on_link = np.flatnonzero(dlink == lk)
            x, y = divmod(lk, ns)
            lost[H.link_name(run.strings.names[x], run.strings.names[y])] = {
                "count": len(on_link),
                "first": [run.value("app", int(s[i])) for i in on_link[: H.LOST_IDS_SHOWN]],
                "last_deliver_t": float(run.t[d.idx[delivered_on_link[-1]]]) if len(delivered_on_link) else None,
            }
    last_deliver = float(run.t[d.idx[-1]]) if len(d.idx) else None
    return H.no_loss_result(len(s), excused, last_deliver, lost, bound_s)


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
    errors.judged += int((~run.rare & ~run.harness).sum())
    return errors.result()
