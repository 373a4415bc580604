"""The progress of a live run, for a display: scenario time, phase, messages sent and delivered,
the faults in force and the nodes' states. The counts cost admin requests, so the nodes are polled
at most once per interval however often a report is asked for."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from splitbrain.harness.backends.admin import AdminError
from splitbrain.harness.backends.base import Cluster, NodeState


@dataclass(frozen=True)
class Progress:
    """What a progress display shows while a live run goes."""

    t: float  # scenario time (s since the origin); negative while nodes start
    end: float  # scenario time the workload and schedule end
    phase: str  # starting | running | settling | stopping
    sent: int
    delivered: int
    faults: tuple[str, ...]  # active faults, described
    nodes: dict  # name -> state value ("running", "paused", "dead")
    note: str = ""  # the step just applied, if any


class ProgressReporter:
    """Calls `show(Progress)` for the run's steps (forced) and at most once per `interval_s` between them."""

    def __init__(self, cluster: Cluster, show: Callable[[Progress], None] | None, interval_s: float):
        self.cluster = cluster
        self.show = show
        self.interval_s = interval_s
        self._last = 0.0
        self._last_counts = (0, 0)
        self._node_counts: dict[tuple[str, int], tuple[int, int]] = {}  # (node, incarnation) -> counts

    def report(
        self, *, t: float | None, end: float, phase: str, faults: tuple[str, ...], force: bool = False, note: str = ""
    ) -> None:
        """`t` is the scenario time, None before the origin (nothing is counted then)."""
        if self.show is None:
            return
        now = time.monotonic()
        due = now - self._last >= self.interval_s
        if not force and not due:
            return
        if due and t is not None:
            # Polling the nodes costs requests: at most once per interval, however many steps
            # are reported in between (six streams starting at t=0 must not wait for it).
            self._last = now
            self._last_counts = self._counts()
        sent, delivered = self._last_counts
        nodes = {name: h.state.value for name, h in self.cluster.nodes.items()}
        self.show(
            Progress(
                t=0.0 if t is None else t,
                end=end,
                phase=phase,
                sent=sent,
                delivered=delivered,
                faults=faults,
                nodes=nodes,
                note=note,
            )
        )

    def _counts(self) -> tuple[int, int]:
        """Messages sent and delivered so far, summed over nodes (a paused or dead node counts
        with what it last said)."""
        for name, handle in self.cluster.nodes.items():
            if handle.state is not NodeState.RUNNING:
                continue
            try:
                admin = self.cluster.admin(name)
                sent = sum(int(s.get("sent", 0)) for s in admin.streams())
                delivered = int(admin.delivered().get("total", 0))
            except (AdminError, AttributeError, TypeError, ValueError):
                continue
            key = (name, handle.incarnation)
            self._node_counts[key] = (sent, delivered)
        sent = sum(c[0] for c in self._node_counts.values())
        delivered = sum(c[1] for c in self._node_counts.values())
        return sent, delivered
