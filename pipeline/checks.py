"""The tables behind the metrics and the advisory check, as DataFrame operations per run.

The checks that decide a run's outcome are the harness's own, run per run by pipeline.judging.
What stays here is what spans many runs at once and feeds the metrics and the report: every
function takes and returns DataFrames and collects nothing.

Order. Ingest numbers each run's events in the order (t, file_key, line) - the order in which
harness.eventlog.read_run merges files and sorts by time (stably) - as `seq`, so "the state when
this event happened" means the same thing on both sides, and ordering costs one long.

Two passes over the events, whatever the number of runs:

1. `summary`: per (run, node, peer, kind), counts, bytes and first/last times by hash
   aggregation over all events (a `drop` event with a `count` stands for that many drops:
   node/dropagg.py aggregates the drops of bad frames), joined with lists of the rare events (final windows, lifecycle,
   new receive windows, heals, MCAST block/unblock). Node lives (incarnations, starts, dead at
   end) and the counts by kind come from this table.
2. `flows`: every send (with app and peer), deliver (with app), retransmit and XMIT-REQ (with
   peer), told its receiver's incarnation and its sender's starts by broadcast joins with the
   small tables, then repartitioned once by (run_id, dst), the receiving node of its link.
   Latency, heal-to-sync and stuck retransmission all window or group by keys that include
   (run_id, dst), so they need no other shuffle.

stuck_retransmission is not a harness check (it never decides a run's outcome): per link X->Y,
an episode is the retransmission activity (X's retransmits to Y, Y's XMIT-REQs to X) between two
deliveries at Y from X; an episode is stuck when no delivery follows it before the end of the
run, it has at least STUCK_MIN_RETRANSMITS retransmits and XMIT-REQs, and they went on for at
least STUCK_MIN_SECONDS after the later of its first one and the run's last heal (so activity
during a partition does not count until it outlasts the heal). Links with an end dead at the end
of the run are excused.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from splitbrain.harness.checks import GRACEFUL_STOP
from splitbrain.node.events import RUN_VERSION

LIFECYCLE = ("node_start", "node_stop")
TRAFFIC = ("send", "deliver", "ack_tx", "ack_rx")
HARNESS = "harness"
STUCK_MIN_RETRANSMITS = 10
STUCK_MIN_SECONDS = 2.0
ADVISORY_CHECKS = ("stuck_retransmission",)

ORD_TYPE = T.LongType()


def ordkey() -> Column:
    """The position of an event in its run (schema.SEQ): harness.eventlog.read_run's merge order."""
    return F.col("seq")


def is_heal() -> Column:
    """harness.checks.is_heal: a harness timeline fault_off, or fault_on of the "heal" fault."""
    from_harness = (F.col("node") == HARNESS) | (F.col("proto") == HARNESS)
    return from_harness & (
        (F.col("kind") == "fault_off") | ((F.col("kind") == "fault_on") & (F.col("fault") == "heal"))
    )


def _false_if_null(col: Column) -> Column:
    return F.coalesce(col, F.lit(False))


def _rows(df: DataFrame, part: str, *cols) -> DataFrame:
    """(run_id, part, named columns): result rows of one kind. All kinds are unioned by name
    (union_rows) into one wide DataFrame, collected once; a column name means the same thing with
    the same type in every kind, and is null where a kind does not set it."""
    return df.select("run_id", F.lit(part).alias("part"), *cols)


def union_rows(parts: list[DataFrame]) -> DataFrame:
    out = parts[0]
    for df in parts[1:]:
        out = out.unionByName(df, allowMissingColumns=True)
    return out


# ---- pass 1: the summary and the small tables -------------------------------------------------


RARE_KINDS = ("window", "node_start", "node_stop", "conn_state", "fault_on", "fault_off", "block", "unblock")
_KEY = ("run_id", "node", "peer", "kind")


def per_message(events: DataFrame) -> DataFrame:
    """The events with each run line (one row for a run of messages, node/events.py) as one row
    per message, as pipeline.runwise.result_parts reads them: seqno and app id counted up from
    the run's first, bytes an even share (the first ones taking the remainder), v 1. The metrics
    are per message (a latency per app id); the warehouse keeps the run as its one row."""
    is_run = F.col("v") == RUN_VERSION
    single = events.where(F.coalesce(~is_run, F.lit(True)))
    i = F.col("_i")
    tail = F.substring_index(F.col("app"), ":", -1)
    prefix = F.expr("substring(app, 1, length(app) - length(substring_index(app, ':', -1)))")
    share = F.floor(F.col("bytes") / F.col("count")) + F.when(i < F.col("bytes") % F.col("count"), 1).otherwise(0)
    runs = (
        events.where(is_run)
        .withColumn("_i", F.explode(F.sequence(F.lit(0).cast("long"), F.col("count") - 1)))
        .withColumn("app", F.when(F.col("app").isNotNull(), F.concat(prefix, (tail.cast("long") + i).cast("string"))))
        .withColumn("seqno", F.col("seqno") + i)
        .withColumn("bytes", F.when(F.col("bytes").isNotNull(), share.cast("long")))
        .withColumn("v", F.lit(1).cast("long"))
        .withColumn("count", F.lit(None).cast("long"))
        .withColumn("last_seqno", F.lit(None).cast("long"))
        .withColumn("last_app", F.lit(None).cast("string"))
        # The run's line is counted once, at its first message (summary's `lines`).
        .withColumn("_same_line", i > 0)
        .drop("_i")
    )
    return single.withColumn("_same_line", F.lit(False)).unionByName(runs)


def multiplicity() -> Column:
    """How many happenings one event stands for: its `count` on a `drop` (the drops of bad frames
    are aggregated, node/dropagg.py), 1 otherwise (`count` means other things on other kinds)."""
    aggregated = (F.col("kind") == "drop") & F.col("count").isNotNull()
    return F.when(aggregated, F.col("count")).otherwise(F.lit(1))


def summary(events: DataFrame) -> DataFrame:
    """One row per (run_id, node, peer, kind) (peer may be null): how many happened (`n`) and how
    many lines said so (`lines`), bytes, first and last time and position, and for the rare kinds
    (final windows, lifecycle, new receive windows, heals, block/unblock) the lists of what the
    checks need. Two aggregations: numbers over all
    events (hash aggregation, nothing sorted), lists over the rare events only."""
    o = ordkey()
    kind = F.col("kind")
    counts = events.groupBy(*_KEY).agg(
        F.sum(multiplicity()).cast("long").alias("n"),
        F.sum(F.when(F.coalesce(F.col("_same_line"), F.lit(False)), 0).otherwise(1)).alias("lines")
        if "_same_line" in events.columns
        else F.count("*").alias("lines"),
        # Events with an application id: a protocol's own messages (GMS's, through UNICAST3) are
        # sent and delivered too, but only these are the applications'.
        F.count("app").alias("apps"),
        F.sum("bytes").alias("bytes_sum"),
        F.min("t").alias("min_t"),
        F.max("t").alias("max_t"),
        F.max(o).alias("last_o"),
    )
    final_window = (kind == "window") & (F.col("final") == True) & F.col("peer").isNotNull()  # noqa: E712
    new_window = (kind == "conn_state") & (F.col("side") == "recv") & F.col("reason").startswith("new_window")
    rare = (
        events.where(kind.isin(*RARE_KINDS))
        .groupBy(*[F.col(k).alias(f"r_{k}") for k in _KEY])
        .agg(
            F.min(F.when(final_window & (F.col("side") == "send"), o)).alias("send_first_o"),
            F.max(final_window).alias("any_final"),
            F.collect_list(
                F.when(
                    final_window & F.col("side").isin("send", "recv"),
                    F.struct(o.alias("o"), "side", "conn_id", "low", "high", "state"),
                )
            ).alias("fw"),
            F.collect_list(
                F.when(kind.isin(*LIFECYCLE), F.struct(o.alias("o"), "kind", "incarnation", "reason"))
            ).alias("lc"),
            F.collect_list(F.when(new_window, o)).alias("nw"),
            F.collect_list(F.when(is_heal(), F.col("t"))).alias("heal_ts"),
            F.collect_list(F.when(kind.isin("block", "unblock"), F.struct(o.alias("o"), "kind", "t"))).alias("bu"),
        )
    )
    cond = [counts[k].eqNullSafe(F.col(f"r_{k}")) for k in _KEY]
    joined = counts.join(rare, cond, "left").drop(*[f"r_{k}" for k in _KEY])
    empty = F.array()
    return joined.select(
        *_KEY,
        "n",
        "lines",
        "apps",
        "bytes_sum",
        "min_t",
        "max_t",
        "last_o",
        "send_first_o",
        _false_if_null(F.col("any_final")).alias("any_final"),
        *[
            F.coalesce(F.col(c), empty.cast(rare.schema[c].dataType)).alias(c)
            for c in ("fw", "lc", "nw", "heal_ts", "bu")
        ],
    )


def _last_window(fw: Column, side: str) -> Column:
    """The final window event of one side last in run order (None if there is none)."""
    return F.array_max(F.filter(fw, lambda w: w["side"] == side))


def _incarnations(starts: Column) -> Column:
    """The incarnation each node_start opens: its own field, else the previous one + 1 (-1 before
    any), exactly as harness.checks.Lives.observe; a fold over the sorted starts."""
    zero = F.struct(
        F.lit(-1).cast("long").alias("prev"),
        F.array()
        .cast(T.ArrayType(T.StructType([T.StructField("o", ORD_TYPE), T.StructField("inc", T.LongType())])))
        .alias("out"),
    )

    def step(acc, x):
        inc = F.coalesce(x["incarnation"], acc["prev"] + 1)
        return F.struct(
            inc.alias("prev"), F.concat(acc["out"], F.array(F.struct(x["o"].alias("o"), inc.alias("inc")))).alias("out")
        )

    return F.aggregate(starts, zero, step)["out"]


def lives(summ: DataFrame) -> DataFrame:
    """Per (run_id, node): starts (sorted (o, inc)), starts_total, dead (the last lifecycle event is
    a node_stop whose reason is not "stop"), last_lc, last_traffic (position of the last
    send/deliver/ack), reported (a final window with a peer was logged)."""
    kind = F.col("kind")
    per_node = summ.groupBy("run_id", "node").agg(
        F.array_sort(F.flatten(F.collect_list(F.when(kind.isin(*LIFECYCLE), F.col("lc"))))).alias("lc"),
        F.max(F.when(kind.isin(*TRAFFIC), F.col("last_o"))).alias("last_traffic"),
        _false_if_null(F.max(F.when(kind == "window", F.col("any_final")))).alias("reported"),
    )
    starts = F.filter("lc", lambda x: x["kind"] == "node_start")
    last_lc = F.try_element_at(F.col("lc"), F.lit(-1))
    return per_node.select(
        "run_id",
        "node",
        "last_traffic",
        "reported",
        _incarnations(starts).alias("starts"),
        F.size(starts).cast("long").alias("starts_total"),
        last_lc.alias("last_lc"),
        # A graceful stop (a live backend ending the run after the final snapshots) is no death.
        _false_if_null((last_lc["kind"] == "node_stop") & ~last_lc["reason"].eqNullSafe(GRACEFUL_STOP)).alias("dead"),
    )


def heals(summ: DataFrame) -> DataFrame:
    """Per run_id: the times of the heals in its harness timeline (sorted) and the last one."""
    return (
        summ.where(F.size("heal_ts") > 0)
        .groupBy("run_id")
        .agg(F.array_sort(F.flatten(F.collect_list("heal_ts"))).alias("heal_ts"))
        .withColumn("last_heal", F.array_max("heal_ts"))
    )


def _count_before(arr: Column, o: Column, field: str | None = None) -> Column:
    """How many positions in the sorted array `arr` come before `o`. Nearly every array holds
    one element (one start per node, one window per link): that case is a plain comparison,
    which Spark compiles, instead of a lambda, which it interprets."""

    def pos(x):
        return x[field] if field else x

    first = F.get(arr, 0)
    return (
        F.when(arr.isNull() | (F.size(arr) == 0), F.lit(0))
        .when(F.size(arr) == 1, F.when(pos(first) < o, F.lit(1)).otherwise(F.lit(0)))
        .otherwise(F.size(F.filter(arr, lambda x: pos(x) < o)))
    ).cast("long")


# ---- pass 2: flows ----------------------------------------------------------------------------


def flows(events: DataFrame, life: DataFrame) -> DataFrame:
    """send (with app and peer, or a multicast's one per other member: is_multicast), deliver (with app),
    retransmit and xmit_req_tx (with peer) rows with
    the context latency, heal-to-sync and stuck retransmission need, repartitioned by (run_id, dst).

    src/dst: the link; for a deliver src is `peer` or, when it is missing or empty, the app id's
    origin (as harness.checks reads it); starts_at: the sender's starts so far (send)."""
    app = F.col("app")
    kind = F.col("kind")
    cols = ("run_id", "kind", "node", "peer", "app", "conn_id", "seqno", "bytes", "t")
    base = events.where(
        ((kind == "send") & app.isNotNull() & F.col("peer").isNotNull())
        | ((kind == "deliver") & app.isNotNull())
        | (kind.isin("retransmit", "xmit_req_tx") & F.col("peer").isNotNull())
    ).select(*cols, ordkey().alias("o"), F.lit(False).alias("is_multicast"))
    # A multicast send (no peer; members = the sender's view): a send to every other member.
    multicasts = (
        events.where((kind == "send") & app.isNotNull() & F.col("peer").isNull() & F.col("members").isNotNull())
        .select(*[c for c in cols if c != "peer"], ordkey().alias("o"), F.explode("members").alias("peer"))
        .where(F.col("peer") != F.col("node"))
        .select(*cols, "o", F.lit(True).alias("is_multicast"))
    )
    base = base.unionByName(multicasts)
    is_deliver = kind == "deliver"
    # Ingest quarantined every deliver whose app id is not "origin:stream:n", so plain string
    # functions split it here (a regex per row costs more than the rest of this select).
    origin = F.expr("substring(app, 1, length(app) - length(substring_index(app, ':', -2)) - 1)")
    sender = F.when(F.col("peer").isNull() | (F.col("peer") == ""), origin).otherwise(F.col("peer"))
    life_b = F.broadcast(life.select("run_id", "node", "starts"))
    df = base.join(life_b, ["run_id", "node"], "left")
    o = F.col("o")
    df = df.select(
        "run_id",
        "kind",
        "node",
        "peer",
        "app",
        "conn_id",
        "seqno",
        "bytes",
        "t",
        "o",
        "is_multicast",
        # An XMIT-REQ is sent by the receiver of the link it asks about.
        F.when(is_deliver | (kind == "xmit_req_tx"), F.col("node")).otherwise(F.col("peer")).alias("dst"),
        F.when(is_deliver, sender).when(kind == "xmit_req_tx", F.col("peer")).otherwise(F.col("node")).alias("src"),
        F.when(kind == "send", _count_before(F.col("starts"), o, "o")).alias("starts_at"),
    )
    return df.repartition("run_id", "dst")


# ---- messages (what latency and heal-to-sync need) ------------------------------------------


def messages(fl: DataFrame, life: DataFrame) -> DataFrame:
    """One row per (run_id, dst, src, app) sent or delivered: the first send, the sender's starts
    at its last send, the first delivery, and the no_loss status: ok, lost, dead_at_end,
    sender_restarted, multicast (timed by latency, judged by the checks), or null when it was
    delivered but never sent (not judged)."""
    is_send = F.col("kind") == "send"
    is_deliver = F.col("kind") == "deliver"
    m = (
        fl.where(F.col("kind").isin("send", "deliver"))
        .groupBy("run_id", "dst", "src", "app")
        .agg(
            F.min(F.when(is_send, F.col("o"))).alias("first_o"),
            F.min(F.when(is_send, F.col("t"))).alias("send_t"),
            F.max_by(F.col("starts_at"), F.when(is_send, F.col("o"))).alias("starts_at"),
            F.min(F.when(is_deliver, F.col("t"))).alias("deliver_t"),
            F.max("is_multicast").alias("is_multicast"),
        )
    )
    ls = F.broadcast(
        life.select(
            "run_id",
            F.col("node").alias("src"),
            F.col("dead").alias("src_dead"),
            F.col("starts_total").alias("src_starts"),
        )
    )
    ld = F.broadcast(life.select("run_id", F.col("node").alias("dst"), F.col("dead").alias("dst_dead")))
    m = m.join(ls, ["run_id", "src"], "left").join(ld, ["run_id", "dst"], "left")
    status = (
        F.when(F.col("first_o").isNull(), F.lit(None))
        # Owed by the view rules of the checks, which a heal's backlog does not know.
        .when(F.col("is_multicast"), F.lit("multicast"))
        .when(_false_if_null(F.col("src_dead")) | _false_if_null(F.col("dst_dead")), F.lit("dead_at_end"))
        .when(F.coalesce(F.col("src_starts"), F.lit(0)) > F.col("starts_at"), F.lit("sender_restarted"))
        .when(F.col("deliver_t").isNull(), F.lit("lost"))
        .otherwise(F.lit("ok"))
    )
    return m.withColumn("status", status)


# ---- stuck retransmission ---------------------------------------------------------------------


def stuck_rows(fl: DataFrame, life: DataFrame, heal: DataFrame) -> DataFrame:
    """Retransmission activity on a link X->Y - X's retransmits to Y and Y's XMIT-REQs to X -
    between deliveries at Y from X, and the episodes that never ended in a delivery."""
    rd = fl.where(F.col("kind").isin("retransmit", "xmit_req_tx", "deliver"))
    link = Window.partitionBy("run_id", "dst", "src")
    running = link.orderBy("o").rowsBetween(Window.unboundedPreceding, 0)
    is_deliver = F.col("kind") == "deliver"
    rd = rd.select(
        "*",
        F.sum(is_deliver.cast("long")).over(running).alias("episode"),
        F.sum(is_deliver.cast("long")).over(link).alias("delivered"),
        F.max(F.when(is_deliver, F.col("t"))).over(link).alias("last_deliver_t"),
    )
    is_rt = F.col("kind") == "retransmit"
    episodes = (
        rd.where(~is_deliver)
        .groupBy("run_id", "dst", "src", "episode")
        .agg(
            F.sum(is_rt.cast("long")).alias("retransmits"),
            F.sum((~is_rt).cast("long")).alias("xmit_reqs"),
            F.min("t").alias("first_t"),
            F.max("t").alias("last_t"),
            F.min(F.when(is_rt, F.col("seqno"))).alias("min_seqno"),
            F.max(F.when(is_rt, F.col("seqno"))).alias("max_seqno"),
            F.first("delivered").alias("delivered"),
            F.first("last_deliver_t").alias("last_deliver_t"),
        )
    )
    dead_s = F.broadcast(life.select("run_id", F.col("node").alias("src"), F.col("dead").alias("src_dead")))
    dead_r = F.broadcast(life.select("run_id", F.col("node").alias("dst"), F.col("dead").alias("dst_dead")))
    ep = (
        episodes.join(F.broadcast(heal.select("run_id", "last_heal")), "run_id", "left")
        .join(dead_s, ["run_id", "src"], "left")
        .join(dead_r, ["run_id", "dst"], "left")
    )
    since = F.greatest(F.col("first_t"), F.coalesce(F.col("last_heal"), F.lit(0.0)))
    is_stuck = (
        (F.col("episode") == F.col("delivered"))
        & (F.col("retransmits") + F.col("xmit_reqs") >= STUCK_MIN_RETRANSMITS)
        & (F.col("last_t") - since >= STUCK_MIN_SECONDS)
        & ~(_false_if_null(F.col("src_dead")) | _false_if_null(F.col("dst_dead")))
    )
    stuck = F.struct(
        "src", "dst", "retransmits", "xmit_reqs", "first_t", "last_t", "min_seqno", "max_seqno", "last_deliver_t"
    )
    per_dst = ep.groupBy("run_id", "dst").agg(
        F.max(F.col("last_t") - F.col("first_t")).alias("longest_episode_s"),
        F.sum("retransmits").alias("retransmits"),
        F.sum("xmit_reqs").alias("xmit_reqs"),
        F.collect_list(F.when(is_stuck, stuck)).alias("stuck"),
    )
    return _rows(per_dst, "stuck", "dst", "longest_episode_s", "retransmits", "xmit_reqs", "stuck")
