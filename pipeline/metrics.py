"""Metrics per run, as DataFrame operations over the same events (and flows) the checks use.

- messages and bytes by kind (send = DATA, and the control traffic of node.protocols.overhead_kinds:
  ack_tx, xmit_req_tx, retransmit and each protocol's own), and their ratio to deliveries.
  `bytes` is the payload of DATA (send, retransmit) and the protocol header of a control message
  (which has no payload); frame and transport headers are not counted.
- delivery latency: for each app id sent on a link, its first delivery t minus its first send t
  (a multicast: from its send to its first delivery at each other member of the sender's view);
  percentiles per run and per receiver (percentile_approx) and a log-scale histogram;
- heal to sync: for each heal in the harness timeline and each link, the messages sent before the
  heal and not delivered by then (the backlog), and how long after the heal the last of them was
  delivered (never, if one of them was not);
- time blocked per node (the block kinds of the protocols' specs: MCAST's block/unblock; no rows
  for UNICAST3, which never blocks);
- views installed per run (from the counts by kind).

Counts by kind count what happened: a `drop` event with a `count` (the drops of bad frames,
aggregated per second by node/dropagg.py) stands for that many drops. `events` counts lines.

Every function returns (run_id, part, columns) rows for pipeline.checks.union_rows.
"""

from __future__ import annotations

import math

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from splitbrain.node import protocols

from .checks import _rows, union_rows

PERCENTILES = (0.5, 0.9, 0.99)
# Latency histogram: LAT_BINS_PER_DECADE bins per factor of 10, from 10 us up.
LAT_BINS_PER_DECADE = 10
LAT_MIN_S = 1e-5


def kind_counts(summ: DataFrame) -> DataFrame:
    return _rows(
        summ.groupBy("run_id", "kind").agg(
            F.sum("n").alias("n"),
            F.sum("lines").alias("lines"),
            F.sum("apps").alias("apps"),
            F.sum("bytes_sum").alias("bytes_sum"),
            F.max("max_t").alias("max_t"),
            F.min("min_t").alias("min_t"),
        ),
        "kinds",
        "kind",
        "n",
        "lines",
        "apps",
        "bytes_sum",
        "max_t",
        "min_t",
    )


def latency(msgs: DataFrame) -> DataFrame:
    lat = msgs.where(F.col("send_t").isNotNull() & F.col("deliver_t").isNotNull()).select(
        "run_id", "dst", (F.col("deliver_t") - F.col("send_t")).alias("lat")
    )

    def stats(*key: str) -> DataFrame:
        return lat.groupBy("run_id", *key).agg(
            F.count("*").alias("lat_n"),
            F.avg("lat").alias("lat_mean"),
            F.max("lat").alias("lat_max"),
            F.percentile_approx("lat", list(PERCENTILES), 10000).alias("lat_p"),
        )

    per_run = stats()
    per_dst = stats("dst")
    clamped = F.greatest(F.col("lat"), F.lit(LAT_MIN_S))
    hist = lat.groupBy("run_id", "dst", F.floor(F.log10(clamped) * LAT_BINS_PER_DECADE).cast("long").alias("bin")).agg(
        F.count("*").alias("n")
    )
    return union_rows(
        [
            _rows(per_run, "latency", "lat_n", "lat_mean", "lat_max", "lat_p"),
            _rows(hist, "lat_hist", "dst", "bin", "n"),
            _rows(per_dst, "lat_dst", "dst", "lat_n", "lat_mean", "lat_max", "lat_p"),
        ]
    )


def bin_edges(b: int) -> tuple[float, float]:
    """The latency range [lo, hi) of histogram bin b, in seconds."""
    return 10 ** (b / LAT_BINS_PER_DECADE), 10 ** ((b + 1) / LAT_BINS_PER_DECADE)


def heal_to_sync(heal: DataFrame, msgs: DataFrame) -> DataFrame:
    heal_times = heal.select("run_id", F.explode(F.array_distinct("heal_ts")).alias("heal_t"))
    judged = msgs.where(F.col("status").isin("ok", "lost") & F.col("send_t").isNotNull())
    backlog = judged.join(F.broadcast(heal_times), "run_id").where(
        (F.col("send_t") < F.col("heal_t")) & (F.col("deliver_t").isNull() | (F.col("deliver_t") >= F.col("heal_t")))
    )
    per_link = backlog.groupBy("run_id", "dst", "src", "heal_t").agg(
        F.count("*").alias("backlog"),
        F.sum(F.col("deliver_t").isNull().cast("long")).alias("undelivered"),
        (F.max("deliver_t") - F.col("heal_t")).alias("catch_up_s"),
    )
    return union_rows(
        [
            _rows(heal_times, "heal", "heal_t"),
            _rows(per_link, "heal_sync", "heal_t", "src", "dst", "backlog", "undelivered", "catch_up_s"),
        ]
    )


def blocked(summ: DataFrame) -> DataFrame:
    """Per node, the time between each block and the next unblock (or the end of the run), with the
    kinds the protocols' specs log for them (node.protocols.block_kinds; MCAST's block and unblock)."""
    blocks, unblocks = protocols.block_kinds()
    per_node = (
        summ.where(F.col("kind").isin(*blocks, *unblocks))
        .groupBy("run_id", "node")
        .agg(F.array_sort(F.flatten(F.collect_list("bu"))).alias("bu"))
    )
    spans = F.transform(
        "bu",
        lambda x, i: F.when(
            x["kind"].isin(*blocks), F.struct(x["t"].alias("t"), F.get(F.col("bu"), i + 1)["t"].alias("next_t"))
        ),
    )
    per_node = per_node.select("run_id", "node", F.filter(spans, lambda s: s.isNotNull()).alias("spans"))
    return _rows(
        per_node,
        "blocked",
        "node",
        F.size("spans").cast("long").alias("blocks"),
        F.aggregate("spans", F.lit(0.0), lambda acc, s: acc + F.coalesce(s["next_t"] - s["t"], F.lit(0.0))).alias(
            "blocked_s"
        ),
        F.array_max(F.transform("spans", lambda s: F.when(s["next_t"].isNull(), s["t"]))).alias("open_since"),
    )


def metric_rows(summ: DataFrame, heal: DataFrame, fl: DataFrame, msgs: DataFrame) -> DataFrame:
    return union_rows([kind_counts(summ), latency(msgs), heal_to_sync(heal, msgs), blocked(summ)])


# ---- per-run dict -----------------------------------------------------------------------------


def run_metrics(parts: dict) -> dict:
    """The metrics of one run as a plain dict (JSON-able), from its collected rows."""
    kinds = {r["kind"]: r for r in parts.get("kinds", [])}
    count = {k: r["n"] for k, r in kinds.items()}
    # Application messages delivered and sent (with an app id); a membership protocol's own
    # messages through the reliable layer are counted under their kinds, not here.
    delivered = int(kinds["deliver"]["apps"] or 0) if "deliver" in kinds else 0
    app_sent = int(kinds["send"]["apps"] or 0) if "send" in kinds else 0
    end_t = max((r["max_t"] for r in kinds.values()), default=None)

    def per_delivered(x):
        return None if not delivered or x is None else x / delivered

    overhead = {}
    overhead_kinds = protocols.overhead_kinds()
    for name, kind in (("data", "send"), *overhead_kinds.items()):
        sent = count.get(kind, 0)
        size = kinds[kind]["bytes_sum"] if kind in kinds else None
        overhead[name] = {
            "messages": sent,
            "per_delivered": per_delivered(sent),
            "bytes": size,
            "bytes_per_delivered": per_delivered(size),
        }
    # Everything but the first transmission of DATA: retransmissions and control messages.
    overhead["total_bytes_per_delivered"] = per_delivered(sum(overhead[name]["bytes"] or 0 for name in overhead_kinds))

    def lat_dict(lat: dict) -> dict:
        p = lat["lat_p"] or [None] * len(PERCENTILES)
        return {
            "n": lat["lat_n"],
            "mean_s": lat["lat_mean"],
            "max_s": lat["lat_max"],
            **{f"p{int(q * 100)}_s": v for q, v in zip(PERCENTILES, p)},
        }

    lat = parts.get("latency", [None])[0]
    latency = None if lat is None else lat_dict(lat)
    by_receiver = {r["dst"]: lat_dict(r) for r in sorted(parts.get("lat_dst", []), key=lambda r: r["dst"])}
    bins: dict[int, int] = {}
    for r in parts.get("lat_hist", []):
        bins[r["bin"]] = bins.get(r["bin"], 0) + r["n"]
    hist = sorted(bins.items())
    heals = []
    by_heal: dict[float, list] = {}
    for r in parts.get("heal_sync", []):
        by_heal.setdefault(r["heal_t"], []).append(r)
    for h in sorted(r["heal_t"] for r in parts.get("heal", [])):
        links = sorted(by_heal.get(h, []), key=lambda r: (r["src"], r["dst"]))
        never = [f"{r['src']}->{r['dst']}" for r in links if r["undelivered"]]
        times = [r["catch_up_s"] for r in links if not r["undelivered"] and r["catch_up_s"] is not None]
        heals.append(
            {
                "t": h,
                "links": {
                    f"{r['src']}->{r['dst']}": {
                        "backlog": r["backlog"],
                        "undelivered": r["undelivered"],
                        "catch_up_s": None if r["undelivered"] else r["catch_up_s"],
                    }
                    for r in links
                },
                "sync_s": None if never else max(times, default=0.0),
                "never_synced": never,
            }
        )
    blocked_s = 0.0
    blocks = 0
    by_node = {}
    for r in sorted(parts.get("blocked", []), key=lambda r: r["node"]):
        seconds = r["blocked_s"] or 0.0
        if r["open_since"] is not None and end_t is not None:
            seconds += max(0.0, end_t - r["open_since"])
        blocks += r["blocks"]
        blocked_s += seconds
        if r["blocks"]:
            by_node[r["node"]] = {"blocks": r["blocks"], "seconds": seconds}
    return {
        "events": sum(r["lines"] for r in kinds.values()),  # lines; `counts` sums aggregated drops
        "delivered": delivered,
        "sent": app_sent,
        "counts": dict(sorted(count.items())),
        "overhead": overhead,
        "latency": latency,
        "latency_by_receiver": by_receiver,
        "latency_hist": hist,
        "heals": heals,
        "blocked": {"blocks": blocks, "seconds": blocked_s, "by_node": by_node} if blocks else None,
        "views": count.get("view", 0),
        "end_t": end_t,
    }


def safe_ratio(a, b):
    return None if not b or a is None or (isinstance(a, float) and math.isnan(a)) else a / b
