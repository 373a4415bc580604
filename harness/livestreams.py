"""A live run's workload: each stream posted to its sender's admin API (POST /send) when its time
comes, deferred while the sender is paused, and picked up again by a restarted sender, numbered
after every slot that passed so that no app id comes twice."""

from __future__ import annotations

from collections.abc import Callable

from splitbrain.harness.backends.admin import AdminError
from splitbrain.harness.backends.base import Cluster, NodeState
from splitbrain.harness.livefaults import FaultBook
from splitbrain.harness.scenario import Scenario, Stream
from splitbrain.harness.slots import planned_count, slots_before
from splitbrain.node.errors import RunFailed


class RunError(RunFailed, RuntimeError):
    """A live run could not go on (a node crashed, an admin request failed)."""


class LiveStreams:
    def __init__(self, cluster: Cluster, scenario: Scenario, book: FaultBook, scenario_time: Callable[[], float]):
        self.cluster = cluster
        self.scenario = scenario
        self.book = book
        self.scenario_time = scenario_time
        self.limits = {s.index: planned_count(s, scenario.duration) for s in scenario.streams}
        self.started: set[int] = set()
        self.posted: dict[int, int] = {}  # stream index -> messages asked for, all incarnations

    def start(self, stream: Stream) -> None:
        self.started.add(stream.index)
        handle = self.cluster.node(stream.src)
        if handle.state is NodeState.RUNNING:
            self._post(stream, self.limits[stream.index])
        elif handle.state is NodeState.PAUSED:
            # A paused application sends nothing; what is left of its slots starts at resume.
            self.book.defer(stream.src, lambda: self._post_remaining(stream))
        # A dead sender's slots pass unsent; a restart picks the stream up (restart).

    def restart(self, node: str) -> None:
        """A restarted sender lost its streams with its process: what is left of them goes on."""
        for stream in self.scenario.streams:
            if stream.src == node and stream.index in self.started:
                self._post_remaining(stream)

    def _post_remaining(self, stream: Stream) -> None:
        missed = slots_before(stream, self.scenario_time())
        remaining = self.limits[stream.index] - missed
        if remaining > 0:
            # Numbered after every slot that passed, so no app id of the old process comes again.
            self._post(stream, remaining, first_n=missed + 1)

    def _post(self, stream: Stream, count: int, first_n: int = 1) -> None:
        try:
            self.cluster.admin(stream.src).send(
                stream.dest, rate=stream.rate, count=count, size=stream.size, stream=stream.index, first_n=first_n
            )
        except AdminError as exc:
            raise RunError(f"stream {stream.index} {stream.src}->{stream.dest}: {exc}") from exc
        self.posted[stream.index] = self.posted.get(stream.index, 0) + count
