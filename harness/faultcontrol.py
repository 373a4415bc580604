"""Faults on a running cluster under test, in the scenario vocabulary (`SplitbrainCluster.faults`):
each call is a schedule step, validated as in a file, that harness.nemesis interprets and
harness.livefaults (or the simulator's driver) carries out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from splitbrain.harness.backends import BackendError
from splitbrain.harness.livefaults import LiveFaults
from splitbrain.harness.scenario import HEALABLE_KINDS, FaultStep, ScenarioError, step_params

if TYPE_CHECKING:
    from splitbrain.harness.testlib import SplitbrainCluster


class FaultController:
    """Faults on a running cluster, in the scenario vocabulary: every call is a schedule step that
    harness.nemesis interprets and harness.livefaults carries out, as in a scenario file's run."""

    def __init__(self, sc: SplitbrainCluster):
        self.sc = sc
        self.steps: dict[int, FaultStep] = {}
        # `until` of a drop is already on the cluster clock (drop() adds now), so the origin is 0.
        # The simulator carries out schedule steps itself (harness.sim.driver.SimFaults).
        executor = getattr(sc.cluster, "fault_executor", None)
        self.live = (
            executor(sc.names, self.steps) if executor is not None else LiveFaults(sc.cluster, sc.names, self.steps)
        )
        self._next = 0

    @property
    def active(self) -> list[int]:
        return self.live.active

    def _step(self, kind: str, body: Any) -> FaultStep:
        index = self._next
        at = max(0.0, self.sc.now())
        try:
            params = step_params(kind, body, f"faults.{kind}", self.sc.names, at, raw_len=index + 1)
        except ScenarioError as exc:
            raise ValueError(str(exc)) from None
        self._next += 1
        step = FaultStep(at=at, kind=kind, params=params, index=index, source_index=index)
        self.steps[index] = step
        return step

    def _apply(self, kind: str, body: Any) -> int:
        step = self._step(kind, body)
        t = self.sc.now()
        entries = self.live.apply(step)
        self.sc.timeline.extend(entry.event(t) for entry in entries)
        return step.index

    # ---- network faults -----------------------------------------------------------------------

    def partition(self, a: str | Iterable[str], b: str | Iterable[str], *, one_way: bool = True) -> int:
        """Cut a -> b (one_way, the default) or both ways; a and b are node names or lists."""
        a_list = [a] if isinstance(a, str) else list(a)
        b_list = [b] if isinstance(b, str) else list(b)
        body: Any = {"from": a_list, "to": b_list} if one_way else [a_list, b_list]
        return self._apply("partition", body)

    def loss(self, link: str, p: float) -> int:
        """Lose a fraction p of the frames on `link` ("A->B", "A<->B", "*")."""
        return self._apply("loss", {"link": link, "p": p})

    def delay(self, link: str, ms: float, jitter_ms: float = 0.0) -> int:
        return self._apply("delay", {"link": link, "ms": ms, "jitter_ms": jitter_ms})

    def duplicate(self, link: str, p: float) -> int:
        return self._apply("duplicate", {"link": link, "p": p})

    def reorder(self, link: str, p: float, ms: float = 10.0) -> int:
        return self._apply("reorder", {"link": link, "p": p, "ms": ms})

    def toxic(self, link: str, type: str, **attributes) -> int:
        """A Toxiproxy toxic on a TCP link (docker, transport tcp): latency, jitter, bandwidth,
        timeout, reset_peer, slicer, limit_data, slow_close, down; attributes in Toxiproxy's names."""
        return self._apply("toxic", {"link": link, "type": type, **attributes})

    def drop(
        self,
        *,
        at: str,
        from_: str | None = None,
        to: str | None = None,
        type: str | Iterable[str] | None = None,
        count: int | None = None,
        p: float = 1.0,
        after: int = 0,
        direction: str | None = None,
        action: str = "drop",
        delay_ms: float = 0.0,
        until_s: float | None = None,
    ) -> int:
        """An in-process rule at node `at`: messages from `from_` (received) or to `to` (sent), of
        the given type(s), p, count, after; `until_s` seconds from now."""
        body: dict[str, Any] = {"at": at}
        if direction is None:
            direction = "down" if to is not None else "up"
        body["direction"] = direction
        if from_ is not None:
            body["from"] = from_
        if to is not None:
            body["to"] = to
        if type is not None:
            body["type"] = type if isinstance(type, str) else list(type)
        if count is not None:
            body["count"] = count
        if p != 1.0:
            body["p"] = p
        if after:
            body["after"] = after
        if action != "drop":
            body["action"] = action
        if delay_ms:
            body["delay_ms"] = delay_ms
        if until_s is not None:
            body["until"] = max(0.0, self.sc.now()) + until_s
        return self._apply("drop", body)

    def heal(self, fault: int | None = None) -> None:
        """Undo one fault (the number its call returned) or every fault in force."""
        if fault is not None and getattr(self.steps.get(fault), "kind", None) not in HEALABLE_KINDS:
            raise ValueError(f"heal({fault!r}): no fault has that number")
        self._apply("heal", "all" if fault is None else fault)

    # ---- nodes --------------------------------------------------------------------------------

    def kill(self, node: str) -> None:
        self._apply("kill", node)

    def restart(self, node: str) -> None:
        self._apply("restart", node)

    def pause(self, node: str) -> None:
        self._apply("pause", node)

    def resume(self, node: str) -> None:
        self._apply("resume", node)

    def sync(self, at: str, peer: str) -> None:
        """The SYNC admin operation of the SYNC design: `at` resyncs its receive window for `peer`."""
        self._apply("sync", {"at": at, "peer": peer})

    def view(self, at: str, members: Iterable[str]) -> None:
        self._apply("view", {"at": at, "members": list(members)})

    def close(self) -> None:
        """Remove every injected fault still in force (in-process rules die with the nodes)."""
        _removed, problems = self.live.close()
        if problems:
            raise BackendError("could not remove every injected fault: " + "; ".join(problems))
