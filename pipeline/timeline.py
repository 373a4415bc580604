"""What a run's timeline plot needs, queried from the events table for a few chosen runs.

Per link X->Y (a pair of nodes with DATA between them) and per time bin (the run cut into about
TIME_BINS bins, so a run of millions of events still gives a plot-sized result): the highest seqno
X sent, Y delivered, X saw acked, X retransmitted, and how many XMIT-REQs Y sent. The rare events
(syncs, connection states, views with their coordinator, suspicions and merges, node lifecycles,
drops, final windows, harness faults, MCAST's window_fill) come back
as they are, and so do the sends that were never delivered and the deliveries of an app id a
receiver already had (at most MARKS per run each), so the picture shows what went wrong where.

Multicast (a `send` without peer but with `members`; NAKACK2, MCAST): per sender and bin the highest
seqno it multicast and, per receiver, the highest of its multicasts that receiver delivered (the
multicast layer's `deliver` events, told from UNICAST3's by the registry's `multicast` flag), so the
report draws one panel per sender. Multicasts are not marked "lost": what a member is owed depends on
the views (harness.checks), and the checks' explanations name what was lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from splitbrain.node import protocols

TIME_BINS = 1500
MARKS = 3000
# The columns of a rare event in a timeline, from the Spark query and from a run's task alike.
RARE_FIELDS = (
    "t", "node", "proto", "kind", "peer", "seqno", "conn_id", "type", "reason", "phase", "side", "state",
    "low", "high", "final", "members", "view_id", "coord", "count", "fault", "detail", "incarnation",
)  # fmt: skip


@dataclass
class LinkSeries:
    sent: list = field(default_factory=list)  # (t, max seqno) per bin
    delivered: list = field(default_factory=list)
    acked: list = field(default_factory=list)
    retransmitted: list = field(default_factory=list)
    xmit_reqs: list = field(default_factory=list)  # (t, count)
    lost: list = field(default_factory=list)  # (t, seqno, app) sends never delivered
    again: list = field(default_factory=list)  # (t, seqno, app) deliveries of an app id seen before


@dataclass
class SenderSeries:
    """A multicast sender: the highest seqno it multicast, and each receiver's highest delivered
    of its multicasts, per bin (the multicast layer's deliveries only, not UNICAST3's)."""

    sent: list = field(default_factory=list)  # (t, max seqno) per bin
    delivered: dict = field(default_factory=dict)  # receiver -> [(t, max seqno)] per bin


@dataclass
class RunTimeline:
    run_id: str
    end_t: float = 0.0
    links: dict = field(default_factory=dict)  # (src, dst) -> LinkSeries
    rare: list = field(default_factory=list)  # dicts of the rare events, by time
    senders: dict = field(default_factory=dict)  # multicast sender -> SenderSeries


def multicast_protos() -> tuple[str, ...]:
    """The `proto` of the layers whose deliveries are multicasts (from the protocol registry)."""
    return tuple(name for name in protocols.names() if protocols.get(name).multicast)


def timeline_data(events: DataFrame, run_ids: list[str], end_times: dict | None = None) -> dict[str, RunTimeline]:
    """RunTimeline per run id: two queries whatever the number of runs. `end_times` (run id ->
    last event time, e.g. from the verdicts' metrics) saves a third one."""
    if not run_ids:
        return {}
    from .checks import per_message

    spark = events.sparkSession
    # A timeline counts messages: run lines (node/events.py) as their messages.
    ev = per_message(events.where(F.col("run_id").isin(*run_ids)))
    ends = dict(end_times or {})
    if any(ends.get(rid) is None for rid in run_ids):
        ends.update({r["run_id"]: r["t1"] for r in ev.groupBy("run_id").agg(F.max("t").alias("t1")).collect()})
    out = {rid: RunTimeline(run_id=rid, end_t=ends.get(rid) or 0.0) for rid in run_ids}
    widths = [(rid, max((ends.get(rid) or 0.0) / TIME_BINS, 1e-6)) for rid in run_ids]
    width = spark.createDataFrame(widths, "run_id string, width double")
    data = ev.where(
        F.col("kind").isin("send", "deliver", "ack_rx", "retransmit", "xmit_req_tx") & F.col("peer").isNotNull()
    ).join(F.broadcast(width), "run_id")
    is_rx = F.col("kind").isin("deliver", "xmit_req_tx")
    data = data.select(
        "run_id",
        "kind",
        "seqno",
        F.when(is_rx, F.col("peer")).otherwise(F.col("node")).alias("src"),
        F.when(is_rx, F.col("node")).otherwise(F.col("peer")).alias("dst"),
        F.floor(F.col("t") / F.col("width")).alias("bin"),
        "width",
    )
    bins = data.groupBy("run_id", "src", "dst", "kind", "bin").agg(
        F.max("seqno").alias("seqno"), F.count("*").alias("n"), F.first("width").alias("width")
    )
    # Sends never delivered on their link, and deliveries of an app id the receiver had already.
    sends = ev.where((F.col("kind") == "send") & F.col("app").isNotNull() & F.col("peer").isNotNull()).select(
        "run_id", F.col("node").alias("src"), F.col("peer").alias("dst"), "app", "t", "seqno"
    )
    delivers = ev.where((F.col("kind") == "deliver") & F.col("app").isNotNull()).select(
        "run_id",
        F.coalesce(F.col("peer"), F.regexp_extract("app", r"(?s)^(.*):([^:]*):([^:]*)$", 1)).alias("src"),
        F.col("node").alias("dst"),
        "app",
        "t",
        "seqno",
        "file_key",
        "line",
    )
    lost = sends.join(delivers.select("run_id", "src", "dst", "app"), ["run_id", "src", "dst", "app"], "left_anti")
    w = Window.partitionBy("run_id", "dst", "src", "app").orderBy("t", "file_key", "line")
    again = delivers.withColumn("_k", F.row_number().over(w)).where(F.col("_k") > 1).drop("_k", "file_key", "line")
    marks = (
        lost.withColumn("what", F.lit("lost"))
        .unionByName(again.withColumn("what", F.lit("again")))
        .withColumn("_rn", F.row_number().over(Window.partitionBy("run_id", "what").orderBy("t")))
        .where(F.col("_rn") <= MARKS)
        .drop("_rn")
    )
    rare = (
        ev.where(F.col("kind").isin(*protocols.rare_event_kinds()))
        .select("run_id", *RARE_FIELDS, "file_key", "line")
        .withColumn("_rn", F.row_number().over(Window.partitionBy("run_id").orderBy("t", "file_key", "line")))
        .where(F.col("_rn") <= 20 * MARKS)
        .drop("_rn", "file_key", "line")
        .withColumn("what", F.lit("rare"))
    )
    # Multicast senders: their sends (no peer, members) and the multicast layer's deliveries.
    kind = F.col("kind")
    is_msend = (kind == "send") & F.col("peer").isNull() & F.col("members").isNotNull()
    is_mdeliver = (kind == "deliver") & F.col("proto").isin(*multicast_protos()) & F.col("peer").isNotNull()
    mbins = (
        ev.where(is_msend | is_mdeliver)
        .join(F.broadcast(width), "run_id")
        .select(
            "run_id",
            "kind",
            "seqno",
            F.when(kind == "deliver", F.col("peer")).otherwise(F.col("node")).alias("src"),
            F.when(kind == "deliver", F.col("node")).otherwise(F.lit("*")).alias("dst"),
            F.floor(F.col("t") / F.col("width")).alias("bin"),
            "width",
        )
        .groupBy("run_id", "src", "dst", "kind", "bin")
        .agg(F.max("seqno").alias("seqno"), F.count("*").alias("n"), F.first("width").alias("width"))
        .withColumn("what", F.lit("mbin"))
    )
    series_of = {"send": "sent", "deliver": "delivered", "ack_rx": "acked", "retransmit": "retransmitted"}
    rows = (
        bins.withColumn("what", F.lit("bin"))
        .unionByName(mbins)
        .unionByName(marks, allowMissingColumns=True)
        .unionByName(rare, allowMissingColumns=True)
        .collect()
    )
    for r in rows:
        tl = out[r["run_id"]]
        what = r["what"]
        if what == "rare":
            d = r.asDict()
            for key in ("what", "bin", "n", "width", "src", "dst", "app"):
                d.pop(key, None)
            tl.rare.append(d)
            continue
        if what == "mbin":
            if r["seqno"] is not None:
                _add_sender_bin(tl.senders, r["src"], r["dst"], (r["bin"] + 0.5) * r["width"], r["seqno"])
            continue
        link = tl.links.setdefault((r["src"], r["dst"]), LinkSeries())
        if what == "bin":
            t = (r["bin"] + 0.5) * r["width"]
            if r["kind"] == "xmit_req_tx":
                link.xmit_reqs.append((t, r["n"]))
            elif r["seqno"] is not None:
                getattr(link, series_of[r["kind"]]).append((t, r["seqno"]))
        else:
            getattr(link, what).append((r["t"], r["seqno"], r["app"]))
    for tl in out.values():
        tl.rare.sort(key=lambda e: e["t"])
        for link in tl.links.values():
            for name in ("sent", "delivered", "acked", "retransmitted", "xmit_reqs", "lost", "again"):
                getattr(link, name).sort(key=lambda x: (x[0], x[1] if x[1] is not None else -1))
        _sort_senders(tl.senders)
    return out


def _add_sender_bin(senders: dict, src: str, dst: str, t: float, seqno: int) -> None:
    series = senders.setdefault(src, SenderSeries())
    (series.sent if dst == "*" else series.delivered.setdefault(dst, [])).append((t, seqno))


def _sort_senders(senders: dict) -> None:
    for series in senders.values():
        series.sent.sort()
        for values in series.delivered.values():
            values.sort()


# ---- the same, for one run's ordered events in plain Python (pipeline.runwise tasks) -----------

_SERIES_OF = {"send": "sent", "deliver": "delivered", "ack_rx": "acked", "retransmit": "retransmitted"}


def timeline_of(events: list[dict]) -> dict:
    """timeline_data's answer for one run from its events in run order, as a JSON-able dict
    (see timeline_from_doc): the same bins, marks and rare events."""
    import math

    from splitbrain.node.events import expand_runs

    events = expand_runs(events)  # a timeline counts messages: run lines as their messages
    end_t = max((e["t"] for e in events), default=0.0)
    width = max(end_t / TIME_BINS, 1e-6)
    rare_kinds = set(protocols.rare_event_kinds())
    mprotos = set(multicast_protos())
    mbins: dict[tuple, int] = {}  # (src, dst or "*", bin) -> max seqno, multicast senders
    bins: dict[tuple, list] = {}
    sends: list[tuple] = []
    delivered: dict[tuple, int] = {}
    again: list[tuple] = []
    rare: list[dict] = []
    for ev in events:
        kind = ev["kind"]
        peer = ev.get("peer")
        if kind in ("send", "deliver", "ack_rx", "retransmit", "xmit_req_tx") and peer is not None:
            rx = kind in ("deliver", "xmit_req_tx")
            src, dst = (peer, ev["node"]) if rx else (ev["node"], peer)
            key = (src, dst, kind, math.floor(ev["t"] / width))
            b = bins.get(key)
            seqno = ev.get("seqno")
            if b is None:
                bins[key] = [seqno, 1]
            else:
                if seqno is not None and (b[0] is None or seqno > b[0]):
                    b[0] = seqno
                b[1] += 1
        if (kind == "send" and peer is None and ev.get("members")) or (
            kind == "deliver" and peer is not None and ev["proto"] in mprotos
        ):
            seqno = ev.get("seqno")
            if seqno is not None:
                mkey = (ev["node"], "*") if kind == "send" else (peer, ev["node"])
                key = (*mkey, math.floor(ev["t"] / width))
                if seqno > mbins.get(key, -1):
                    mbins[key] = seqno
        app = ev.get("app")
        if app is not None:
            if kind == "send" and peer is not None:
                sends.append((ev["node"], peer, app, ev["t"], ev.get("seqno")))
            elif kind == "deliver":
                src = peer if peer is not None else app.rsplit(":", 2)[0]
                link_app = (src, ev["node"], app)
                seen = delivered.get(link_app, 0)
                delivered[link_app] = seen + 1
                if seen:
                    again.append((src, ev["node"], app, ev["t"], ev.get("seqno")))
        if kind in rare_kinds and len(rare) < 20 * MARKS:
            rare.append({name: ev.get(name) for name in RARE_FIELDS})
    lost = [s for s in sends if (s[0], s[1], s[2]) not in delivered]
    links: dict[tuple, dict] = {}

    def link(src, dst) -> dict:
        return links.setdefault((src, dst), {name: [] for name in LinkSeries.__dataclass_fields__})

    for (src, dst, kind, b), (seqno, n) in bins.items():
        t = (b + 0.5) * width
        if kind == "xmit_req_tx":
            link(src, dst)["xmit_reqs"].append((t, n))
        elif seqno is not None:
            link(src, dst)[_SERIES_OF[kind]].append((t, seqno))
    for what, marks in (("lost", lost), ("again", again)):
        for src, dst, app, t, seqno in sorted(marks, key=lambda m: m[3])[:MARKS]:
            link(src, dst)[what].append((t, seqno, app))
    for series in links.values():
        for values in series.values():
            values.sort(key=lambda x: (x[0], x[1] if x[1] is not None else -1))
    senders: dict[str, dict] = {}
    for (src, dst, b), seqno in mbins.items():
        doc = senders.setdefault(src, {"sent": [], "delivered": {}})
        (doc["sent"] if dst == "*" else doc["delivered"].setdefault(dst, [])).append(((b + 0.5) * width, seqno))
    for doc in senders.values():
        doc["sent"].sort()
        for values in doc["delivered"].values():
            values.sort()
    return {
        "end_t": end_t,
        "links": [[s, d, series] for (s, d), series in links.items()],
        "rare": rare,
        "senders": senders,
    }


def timeline_from_doc(run_id: str, doc: dict, end_t: float | None = None) -> RunTimeline:
    """The RunTimeline of a timeline_of document."""
    tl = RunTimeline(run_id=run_id, end_t=end_t if end_t is not None else doc["end_t"], rare=list(doc["rare"]))
    for src, dst, series in doc["links"]:
        tl.links[(src, dst)] = LinkSeries(**{name: [tuple(x) for x in values] for name, values in series.items()})
    for src, sdoc in doc.get("senders", {}).items():
        tl.senders[src] = SenderSeries(
            sent=[tuple(x) for x in sdoc["sent"]],
            delivered={dst: [tuple(x) for x in values] for dst, values in sdoc["delivered"].items()},
        )
    return tl
