"""Prometheus metrics of one node, read from the node's own counters when scraped.

Nothing is counted twice: the protocol layers already count their messages (a `counters` dict
per layer: tx_<TYPE>/rx_<TYPE>, retransmit, xmit_reqs, rx_duplicate, syncs_*), the
transport its frames and bytes, the application its deliveries. A custom collector turns those
into metric families at scrape time, so the message path pays nothing for metrics. Each node has
its own CollectorRegistry (never the global one), so several nodes can live in one process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

if TYPE_CHECKING:
    from .node import Node

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
P = "splitbrain_"


class NodeCollector:
    def __init__(self, node: Node):
        self.node = node

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | InfoMetricFamily]:
        node = self.node
        counters: dict[str, int] = {}
        for layer in node.protocol_layers:
            for key, value in (getattr(layer, "counters", None) or {}).items():
                counters[key] = counters.get(key, 0) + value
        windows = [w for layer in node.protocol_layers for w in layer.windows()]

        info = InfoMetricFamily(P + "node", "The node's identity")
        info.add_metric(
            [],
            {
                "node": node.name,
                "incarnation": str(node.incarnation),
                "protocol": node.config.protocol,
                "transport": node.config.transport,
            },
        )
        yield info
        up = GaugeMetricFamily(P + "uptime_seconds", "Seconds since the node started")
        up.add_metric([], node.uptime())
        yield up

        msgs = CounterMetricFamily(
            P + "messages", "Protocol messages by type and direction", labels=["type", "direction"]
        )
        for key, value in sorted(counters.items()):
            direction, _, mtype = key.partition("_")
            if direction in ("tx", "rx") and mtype.isupper():
                msgs.add_metric([mtype, "out" if direction == "tx" else "in"], value)
        yield msgs
        drops = CounterMetricFamily(
            P + "protocol_drops", "Messages a protocol layer rejected, by message type", labels=["type"]
        )
        for key, value in sorted(counters.items()):
            if key.startswith("dropped_"):
                drops.add_metric([key[len("dropped_") :]], value)
        yield drops
        if "gms_views" in counters or "gms_heartbeats_tx" in counters:
            heartbeats = CounterMetricFamily(
                P + "gms_heartbeats", "GMS heartbeats sent and received (FD_ALL3)", labels=["dir"]
            )
            heartbeats.add_metric(["tx"], counters.get("gms_heartbeats_tx", 0))
            heartbeats.add_metric(["rx"], counters.get("gms_heartbeats_rx", 0))
            yield heartbeats
            yield _counter(
                "gms_suspicions", "Members suspected by failure detection", counters.get("gms_suspicions", 0)
            )
            yield _counter("gms_views", "Views installed by GMS", counters.get("gms_views", 0))
            yield _counter(
                "gms_merges", "Merged views installed by this node as merge leader", counters.get("gms_merges", 0)
            )
        yield _counter("retransmissions", "DATA messages sent again", counters.get("retransmit", 0))
        yield _counter("xmit_reqs", "XMIT-REQs sent", counters.get("xmit_reqs", 0))
        yield _counter("duplicate_messages_received", "DATA messages received twice", counters.get("rx_duplicate", 0))
        syncs = CounterMetricFamily(P + "syncs", "Resyncs by outcome", labels=["outcome"])
        for outcome in ("started", "completed", "timed_out"):
            syncs.add_metric([outcome], counters.get(f"syncs_{outcome}", 0))
        yield syncs

        assert node.transport is not None, "metrics are served by a started node"
        tstats = node.transport.stats
        frames = CounterMetricFamily(
            P + "frames", "Frames (datagrams or TCP frames) by direction", labels=["direction"]
        )
        frames.add_metric(["in"], node.rx_stats.frames_in)
        frames.add_metric(["out"], tstats.frames_out)
        yield frames
        nbytes = CounterMetricFamily(P + "bytes", "Frame bytes by direction", labels=["direction"])
        nbytes.add_metric(["in"], node.rx_stats.bytes_in)
        nbytes.add_metric(["out"], tstats.bytes_out)
        yield nbytes
        yield _counter("malformed_frames", "Frames that could not be decoded", node.rx_stats.malformed)
        yield _counter(
            "stack_errors",
            "Exceptions raised inside the protocol stack (bugs; error events)",
            node.rx_stats.stack_errors,
        )
        dropped = CounterMetricFamily(
            P + "dropped_frames", "Frames dropped by the transport", labels=["direction", "reason"]
        )
        for reason, value in sorted(node.rx_stats.dropped.items()):
            dropped.add_metric(["in", reason], value)
        dropped.add_metric(["out", "unsendable"], tstats.dropped_out)
        yield dropped
        yield _counter("send_errors", "Errors reported by the socket on send", tstats.send_errors)
        if node.config.transport == "tcp":
            yield _counter("tcp_connects", "Outgoing TCP connections made", tstats.connects)
            yield _counter("tcp_connect_failures", "Failed TCP connection attempts", tstats.connect_failures)
            yield _counter("tcp_connections_lost", "TCP connections lost", tstats.connections_lost)

        send_w = GaugeMetricFamily(P + "send_window_messages", "Unacked messages per peer (HS - HA)", labels=["peer"])
        for w in sorted((w for w in windows if w.side == "send"), key=lambda w: w.peer):
            send_w.add_metric([w.peer], w.pending)
        yield send_w
        recv_w = GaugeMetricFamily(
            P + "recv_window_messages", "Messages received but not deliverable yet, per peer", labels=["peer"]
        )
        recv_m = GaugeMetricFamily(P + "recv_window_missing", "Missing seqnos per peer", labels=["peer"])
        for w in sorted((w for w in windows if w.side == "recv"), key=lambda w: w.peer):
            recv_w.add_metric([w.peer], w.pending)
            recv_m.add_metric([w.peer], w.missing)
        yield recv_w
        yield recv_m

        delivered = CounterMetricFamily(
            P + "delivered", "Messages delivered to the application, per sender", labels=["sender"]
        )
        for sender, count in sorted(node.delivered.per_sender_counts().items()):
            delivered.add_metric([sender], count)
        yield delivered
        sent = CounterMetricFamily(
            P + "app_sent", "Workload messages handed to the stack, per destination", labels=["peer"]
        )
        for peer, count in sorted(node.app_sent.items()):
            sent.add_metric([peer], count)
        yield sent
        if node.eventlog is not None:
            yield _counter("events_written", "Events written to the event log", node.eventlog.written)
        faults = CounterMetricFamily(
            P + "fault_actions", "Messages the in-process fault layer acted on", labels=["action"]
        )
        for action, value in sorted(node.faults.counters.items()):
            faults.add_metric([action], value)
        yield faults


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    c = CounterMetricFamily(P + name, doc)
    c.add_metric([], value)
    return c


def make_registry(node: Node) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
