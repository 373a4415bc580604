"""One run's metric and advisory rows (pipeline.runwise.result_parts) from its stored columns.

Theory of operation. result_parts walks a run in `seq` order and keys everything by kind, by
message (dst, src, app), by link and by heal. Here the same keys are integer codes and each table
is a group-by over numpy arrays; rows come out in the order the walk inserts them (first
appearance), and every number is computed as the walk computes it: counts and integer sums,
minima and maxima picked from the values themselves, means with math.fsum, percentiles by index
into the sorted values, histogram bins with math.log10 wherever numpy's log10 could land on the
other side of a bin edge. Blocked time (MCAST's few block/unblock events) is the walk's own code
over those events. `parts_of_table` returns None (the caller walks the events) for a run with
multicast sends (their latency rows count each member), a t of -0.0 (which an equal 0.0 could
stand for) or non-unique seqs.

The metrics are per message, as the walk counts a run row (node/events.py) as its messages: a
run row adds its `count` to its kind's counts, and the sends and deliveries a latency pairs up
are made per message as integer arrays (pipeline.columnar_apps.expand), each numbered by its
place in the walk (its row's position, then its offset in the run), an app id being its stream
and n. Retransmission episodes weigh a run row by its count and span its seqnos.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from splitbrain.harness.checks import GRACEFUL_STOP, HARNESS

from . import runwise as R
from .columnar import _bools, _count_before, _is_identity, _Strings
from .columnar_apps import AppIds, dense, encoded, equals, expand, message_counts, one_array

_NO_INT = np.iinfo(np.int64).min


def parts_of_table(table: pa.Table, apps: AppIds | None = None) -> dict[str, list[dict]] | None:
    """runwise.result_parts of the run's stored events (strings plain or as dictionaries; `apps`
    its app column's AppIds, shared with pipeline.columnar), or None where it must walk them."""
    n = table.num_rows
    seq = one_array(table.column("seq")).to_numpy()
    order = np.argsort(seq, kind="stable")
    if n == 0 or (np.diff(seq[order]) <= 0).any():
        return None
    take = None if _is_identity(order) else pa.array(order)

    def col(name: str) -> pa.Array:
        column = one_array(table.column(name))
        return column if take is None else column.take(take)

    t = col("t").to_numpy()
    if ((t == 0) & np.signbit(t)).any():
        return None
    kind_enc = encoded(col("kind"))
    kinds = kind_enc.dictionary.to_pylist()
    ki = kind_enc.indices.to_numpy()

    def is_kind(*names: str) -> np.ndarray:
        return np.isin(ki, [i for i, k in enumerate(kinds) if k in names])

    strings = _Strings()
    node = strings.codes(col("node"))
    peer = strings.codes(col("peer"))
    apps = apps if apps is not None else AppIds(table.column("app"))
    app = apps.code if take is None else apps.code[order]
    has_app = app >= 0
    send, deliver = is_kind("send"), is_kind("deliver")
    if (send & has_app & (peer < 0) & _bools(col("members").is_valid())).any():
        return None
    is_run, count = message_counts(table, None if take is None else order)
    if is_run.any() and not apps.well_formed[app[is_run & has_app]].all():
        return None
    # Each message's place in the walk: its row's messages before it, then its offset.
    first_message = np.cumsum(count) - count
    messages = int(count.sum())
    parts: dict[str, list[dict]] = {"kinds": _kinds(kinds, ki, t, col, has_app, is_run, count)}

    # Lifecycles (few): starts per node and who is dead at the end.
    life_idx = np.flatnonzero(is_kind("node_start", "node_stop"))
    life_rows = table.select(["node", "kind", "reason"]).take(pa.array(order[life_idx])).to_pylist()
    last: dict[str, dict] = {}
    start_pos, start_node = [], []
    for p, row in zip(life_idx.tolist(), life_rows):
        last[row["node"]] = row
        if row["kind"] == "node_start":
            start_pos.append(p)
            start_node.append(strings.code(row["node"]))
    dead = {x for x, row in last.items() if row["kind"] == "node_stop" and row["reason"] != GRACEFUL_STOP}
    starts_pos = first_message[np.array(start_pos, dtype=np.int64)]
    starts_node = np.array(start_node, dtype=np.int64)

    # Messages (dst, src, app): sends to a peer and deliveries, keyed in order of first appearance.
    s_idx = np.flatnonzero(send & has_app & (peer >= 0))
    d_idx = np.flatnonzero(deliver & has_app)
    d_app = app[d_idx]
    origin = strings.coded(apps.origins, apps.origin[d_app])
    empty = strings.index.get("", -2)
    d_src = np.where((peer[d_idx] >= 0) & (peer[d_idx] != empty), peer[d_idx], origin)
    ns = len(strings.names)
    m_row, m_offset = expand(np.concatenate([s_idx, d_idx]), count)
    m_idx = first_message[m_row] + m_offset
    m_dst = np.concatenate([peer[s_idx], node[d_idx]])
    m_src = np.concatenate([node[s_idx], d_src])
    m_is_send = np.concatenate([np.ones(len(s_idx), bool), np.zeros(len(d_idx), bool)])
    if messages != n:  # run rows: a value per message of each row
        rows_of = np.repeat(np.arange(len(s_idx) + len(d_idx)), count[np.concatenate([s_idx, d_idx])])
        m_dst, m_src, m_is_send = m_dst[rows_of], m_src[rows_of], m_is_send[rows_of]
    # An app id: its stream and n where it has the nodes' form, else its own code after those.
    m_app = app[m_row]
    well = apps.well_formed[m_app]
    app_code = np.where(well, 0, apps.n_values + m_app)
    if well.any():
        app_code[well] = dense(apps.prefix[m_app[well]], apps.n[m_app[well]] + m_offset[well])
    na = int(app_code.max(initial=0)) + 1
    keys = (m_dst * ns + m_src) * na + app_code
    by = np.lexsort((m_idx, keys))
    k_sorted = keys[by]
    first_of = np.r_[True, k_sorted[1:] != k_sorted[:-1]] if len(by) else np.zeros(0, bool)
    group_sorted = np.cumsum(first_of) - 1
    groups = int(group_sorted[-1]) + 1 if len(by) else 0
    heads = np.flatnonzero(first_of)
    # Per message, reduced over its rows (sorted by key, then position).
    sorted_send, sorted_idx, sorted_t = m_is_send[by], m_idx[by], t[m_row[by]]

    def per_message(ufunc, values: np.ndarray) -> np.ndarray:
        return ufunc.reduceat(values, heads) if groups else values[:0]

    first_pos = sorted_idx[heads]
    rank = np.argsort(first_pos, kind="stable")  # the walk's order of the messages
    send_t = per_message(np.minimum, np.where(sorted_send, sorted_t, np.inf))
    deliver_t = per_message(np.minimum, np.where(sorted_send, np.inf, sorted_t))
    has_send = per_message(np.maximum, sorted_send.astype(np.int8)) > 0
    has_deliver = per_message(np.maximum, (~sorted_send).astype(np.int8)) > 0
    last_send = per_message(np.maximum, np.where(sorted_send, sorted_idx, -1))
    g_dst, g_src = m_dst[by][heads], m_src[by][heads]
    starts_at = _count_before(starts_node, starts_pos, g_src, np.maximum(last_send, 0), messages)
    starts_total = _count_before(starts_node, starts_pos, g_src, np.full(groups, messages), messages)
    dead_code = np.isin(np.arange(ns), [strings.index[x] for x in dead if x in strings.index])
    # ok / lost: what heal-to-sync judges (not dead at the end, sender not restarted since).
    judged = has_send & ~dead_code[g_src] & ~dead_code[g_dst] & ~(starts_total > starts_at)

    # Latency, over all links and per receiver, in the walk's order of the messages.
    both = rank[(has_send & has_deliver)[rank]]
    lats = deliver_t[both] - send_t[both]
    if len(lats):
        parts["latency"] = [_lat_row(lats)]
    bins = _bins(lats)
    hist_keys = g_dst[both] * (1 << 20) + (bins + (1 << 19))
    parts["lat_hist"] = [
        {"dst": strings.names[int(k) >> 20], "bin": int(k & ((1 << 20) - 1)) - (1 << 19), "n": int(c)}
        for k, c in _counts_in_order(hist_keys)
    ]
    parts["lat_dst"] = [
        _lat_row(lats[g_dst[both] == d], dst=strings.names[int(d)]) for d, _c in _counts_in_order(g_dst[both])
    ]

    # Heal to sync.
    is_h = (node == strings.index.get(HARNESS, -2)) | equals(col("proto"), HARNESS)
    fault = col("fault")
    heal = is_h & (is_kind("fault_off") | (is_kind("fault_on") & equals(fault, "heal")))
    heals = sorted(set(t[heal].tolist()))
    parts["heal"] = [{"heal_t": h} for h in heals]
    rows = []
    judged_ranked = rank[judged[rank]]
    for h in heals:
        hit = judged_ranked[
            (send_t[judged_ranked] < h) & (~has_deliver[judged_ranked] | (deliver_t[judged_ranked] >= h))
        ]
        link = g_dst[hit] * ns + g_src[hit]
        for lk, _c in _counts_in_order(link):
            on = hit[link == lk]
            delivered = on[has_deliver[on]]
            latest = float(deliver_t[delivered].max()) if len(delivered) else None
            rows.append(
                {
                    "heal_t": h,
                    "src": strings.names[int(lk) % ns],
                    "dst": strings.names[int(lk) // ns],
                    "backlog": len(on),
                    "undelivered": int(len(on) - len(delivered)),
                    "catch_up_s": None if latest is None else latest - h,
                }
            )
    parts["heal_sync"] = rows
    parts["blocked"] = _blocked(table, order, np.flatnonzero(is_kind("block", "unblock")))
    parts["stuck"] = _stuck(t, node, peer, col, d_idx, d_src, strings, dead, heal, is_kind, n, is_run, count)
    return parts


def _kinds(
    kinds: list[str], ki: np.ndarray, t: np.ndarray, col, has_app: np.ndarray, is_run: np.ndarray, messages: np.ndarray
) -> list[dict]:
    codes, first = np.unique(ki, return_index=True)
    count = col("count")
    # A version-1 drop's count aggregates drops; a run row's count is its messages (any kind).
    has_count = _bools(count.is_valid()) & ~is_run
    counts = count.fill_null(0).to_numpy()
    size = col("bytes")
    has_bytes = _bools(size.is_valid())
    sizes = size.fill_null(0).to_numpy()
    out = []
    for c in codes[np.argsort(first)]:
        mine = ki == c
        kind = kinds[int(c)]
        lines = int(mine.sum())
        n = _int_sum(messages[mine])
        if kind == "drop":
            n += _int_sum(counts[mine & has_count]) - int((mine & has_count).sum())
        b = mine & has_bytes
        bytes_sum = _int_sum(sizes[b]) if b.any() else None
        tk = t[mine]
        out.append(
            {
                "kind": kind,
                "n": n,
                "lines": lines,
                "apps": _int_sum(messages[mine & has_app]),
                "bytes_sum": bytes_sum,
                "max_t": float(tk.max()),
                "min_t": float(tk.min()),
            }
        )
    return out


def _weight_before(
    mark_keys: np.ndarray, mark_pos: np.ndarray, weights: np.ndarray, keys: np.ndarray, pos: np.ndarray, n: int
) -> np.ndarray:
    """For each (key, pos): the weights of the marks with the same key at a position before pos."""
    if not len(mark_keys):
        return np.zeros(len(keys), dtype=np.int64)
    composite = mark_keys * (n + 1) + mark_pos
    o = np.argsort(composite, kind="stable")
    marks = composite[o]
    total = np.concatenate([[0], np.cumsum(weights[o])])
    base = keys * (n + 1)
    return total[np.searchsorted(marks, base + pos, "left")] - total[np.searchsorted(marks, base, "left")]


def _int_sum(values: np.ndarray) -> int:
    """Python's sum of int64 values (numpy's where it cannot overflow)."""
    if not len(values) or int(np.abs(values).max()) * len(values) < 2**63:
        return int(values.sum())
    return int(sum(values.tolist()))


def _lat_row(lats: np.ndarray, **key) -> dict:
    ordered = np.sort(lats)
    return {
        **key,
        "lat_n": len(lats),
        "lat_mean": math.fsum(lats.tolist()) / len(lats),
        "lat_max": float(ordered[-1]),
        "lat_p": [float(ordered[max(0, math.ceil(q * len(ordered)) - 1)]) for q in R.PERCENTILES],
    }


def _bins(lats: np.ndarray) -> np.ndarray:
    """math.floor(math.log10(max(lat, LAT_MIN_S)) * LAT_BINS_PER_DECADE), with math's log10 where
    numpy's result is near a bin edge (the two may differ in the last bit)."""
    x = np.log10(np.maximum(lats, R.LAT_MIN_S)) * R.LAT_BINS_PER_DECADE
    bins = np.floor(x).astype(np.int64)
    near = np.flatnonzero(np.abs(x - np.round(x)) < 1e-6)
    for i in near.tolist():
        bins[i] = math.floor(math.log10(max(float(lats[i]), R.LAT_MIN_S)) * R.LAT_BINS_PER_DECADE)
    return bins


def _counts_in_order(keys: np.ndarray) -> list[tuple[int, int]]:
    """(key, count) in order of each key's first appearance."""
    u, first, counts = np.unique(keys, return_index=True, return_counts=True)
    o = np.argsort(first)
    return list(zip(u[o].tolist(), counts[o].tolist()))


def _blocked(table: pa.Table, order: np.ndarray, idx: np.ndarray) -> list[dict]:
    """runwise.result_parts' blocked rows over the block and unblock events themselves."""
    rows = table.select(["node", "kind", "t"]).take(pa.array(order[idx])).to_pylist()
    bu: dict[str, list] = {}
    for p, row in zip(idx.tolist(), rows):
        bu.setdefault(row["node"], []).append((p, row["kind"], row["t"]))
    return R.blocked_rows(bu)


def _stuck(t, node, peer, col, d_idx, d_src, strings, dead, heal, is_kind, n, is_run, count) -> list[dict]:
    """runwise.result_parts' stuck rows: per link X->Y, episodes of retransmissions and
    retransmission requests between deliveries at Y from X (a run row weighs its count: an
    episode is keyed by the messages delivered before it, and a retransmitted run spans its
    seqnos)."""
    ns = len(strings.names)
    r_idx = np.flatnonzero(is_kind("retransmit") & (peer >= 0))
    x_idx = np.flatnonzero(is_kind("xmit_req_tx") & (peer >= 0))
    # Links keyed dst * ns + src, as the walk's flows name them.
    d_link = node[d_idx] * ns + d_src
    o_idx = np.concatenate([r_idx, x_idx])
    o_link = np.concatenate([peer[r_idx] * ns + node[r_idx], node[x_idx] * ns + peer[x_idx]])
    o_rt = np.concatenate([np.ones(len(r_idx), bool), np.zeros(len(x_idx), bool)])
    by = np.argsort(o_idx, kind="stable")
    o_idx, o_link, o_rt = o_idx[by], o_link[by], o_rt[by]
    links_order = _counts_in_order(np.concatenate([d_link, o_link])[np.argsort(np.concatenate([d_idx, o_idx]))])
    episode = _weight_before(d_link, d_idx, count[d_idx], o_link, o_idx, n)
    o_count = count[o_idx]
    seqno = col("seqno")
    has_seqno = _bools(seqno.is_valid())[o_idx]
    seqnos = seqno.fill_null(0).to_numpy()[o_idx]
    last_seqnos = seqnos
    if is_run[o_idx].any():
        last_seqnos = np.where(is_run[o_idx], col("last_seqno").fill_null(0).to_numpy()[o_idx], seqnos)
    ot = t[o_idx]
    last_heal = max(t[heal].tolist()) if heal.any() else None
    per_dst: dict[str, dict] = {}
    if not len(o_idx):
        return []
    # Episodes: (link, deliveries before) groups of the other rows, reduced at once.
    by = np.lexsort((o_idx, episode, o_link))
    g_link_rows, g_ep_rows, rt_rows = o_link[by], episode[by], o_rt[by]
    heads = np.flatnonzero(np.r_[True, (g_link_rows[1:] != g_link_rows[:-1]) | (g_ep_rows[1:] != g_ep_rows[:-1])])
    sizes = np.add.reduceat(o_count[by], heads)
    n_rts = np.add.reduceat(np.where(rt_rows, o_count[by], 0), heads)
    firsts = np.minimum.reduceat(ot[by], heads)
    lasts = np.maximum.reduceat(ot[by], heads)
    numbered = rt_rows & has_seqno[by]
    min_ss = np.minimum.reduceat(np.where(numbered, seqnos[by], np.iinfo(np.int64).max), heads)
    max_ss = np.maximum.reduceat(np.where(numbered, last_seqnos[by], np.iinfo(np.int64).min), heads)
    any_ss = np.maximum.reduceat(numbered.astype(np.int8), heads) > 0
    g_links, g_eps = g_link_rows[heads], g_ep_rows[heads]
    link_of, link_start, link_groups = np.unique(g_links, return_index=True, return_counts=True)
    where = {int(lk): (int(a), int(a + c)) for lk, a, c in zip(link_of, link_start, link_groups)}
    for lk, _c in links_order:
        if lk not in where:
            continue
        dst, src = strings.names[lk // ns], strings.names[lk % ns]
        on_link = d_link == lk
        delivered = _int_sum(count[d_idx[on_link]])
        last_deliver_t = float(t[d_idx[on_link]].max()) if delivered else None
        d = per_dst.setdefault(
            dst, {"dst": dst, "longest_episode_s": None, "retransmits": 0, "xmit_reqs": 0, "stuck": []}
        )
        excused = src in dead or dst in dead
        a, b = where[lk]
        for g in range(a, b):
            e = int(g_eps[g])
            n_rt = int(n_rts[g])
            n_xr = int(sizes[g]) - n_rt
            first_t, last_t = float(firsts[g]), float(lasts[g])
            min_s = int(min_ss[g]) if any_ss[g] else None
            max_s = int(max_ss[g]) if any_ss[g] else None
            counts = (n_rt, n_xr, first_t, last_t, min_s, max_s)
            R.add_episode(d, src, dst, e == delivered, counts, last_heal, last_deliver_t, excused)
    return list(per_dst.values())
