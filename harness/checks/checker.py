"""The `Checker` protocol: what a check is to run_checks, the registry and the reports.

A checker is made once per judged run, with the run's bounds (CheckContext), and is fed the run's
merged log once, in time order, by streaming hooks: `see_send` and `see_deliver` for one message,
`see_send_run` and `see_deliver_run` for a run line (one line for a run of consecutive sends or
deliveries, node/events.py), `see_other` for every other event (lifecycles, views, windows,
protocol events, the harness's fault timeline). Then `result()` gives its CheckResult. Besides
the hooks a checker says its `name` (what a scenario's `checks:` names), its `bound_key` (the
scenario key its bound comes from, e.g. `xmit_bound`, or None), the `unit` of its `judged` count as
the one-line summary words it, and whether it judges only stacks with a membership protocol.

`Check` is the base class of the built-in checkers: hooks a checker does not override cost nothing
(run_checks feeds only overridden ones), and a run line goes to a checker that reads only single
messages as those messages, made one at a time. A checker keeps what it needs as the log goes by;
what grows with the messages (rather than with runs, windows and faults) is what makes a long run
expensive to judge.

Parts of state that several checkers share (fifo and no_duplicates both ask which repeats a
discard excuses) are `Part`s: `CheckContext.shared(cls)` makes one per run, fed before the
checkers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from .events import run_messages
from .results import CheckResult


@dataclass
class CheckContext:
    """One run's bounds, as the checkers of that run see them, and the parts they share.

    `recovery_bound_s` is no_loss' bound (None: default_recovery_bound_s()); `ack_bounds` maps a
    protocol to the time its senders may wait for acks and the setting behind it
    (node.compose.ack_bounds); `bounds` maps a scenario key (a checker's `bound_key`) to its
    value, None where not given."""

    recovery_bound_s: float | None = None
    ack_bounds: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    bounds: Mapping[str, Any] = field(default_factory=dict)
    parts: dict[type, Part] = field(default_factory=dict)

    def bound(self, key: str | None) -> Any:
        return None if key is None else self.bounds.get(key)

    def shared(self, cls: type[P]) -> P:
        """The run's one instance of a shared part (made on first ask)."""
        part = self.parts.get(cls)
        if part is None:
            part = self.parts[cls] = cls()
        return part  # type: ignore[return-value]


@cache
def default_recovery_bound_s() -> float:
    """no_loss' bound when a caller gives none: the default protocol's with its default settings
    (scenarios resolve theirs from their own protocol, Scenario.recovery_bound)."""
    from splitbrain.node import protocols

    return protocols.get(protocols.DEFAULT_PROTOCOL).config({}).recovery_bound_s


@runtime_checkable
class Checker(Protocol):
    """What run_checks needs of a check (see the module docstring)."""

    name: ClassVar[str]
    bound_key: ClassVar[str | None]
    unit: ClassVar[str]
    membership: ClassVar[bool]

    def see_send(self, ev: dict, /) -> None: ...

    def see_deliver(self, ev: dict, /) -> None: ...

    def see_send_run(self, run: dict, /) -> None: ...

    def see_deliver_run(self, run: dict, /) -> None: ...

    def see_other(self, ev: dict, /) -> None: ...

    def result(self) -> CheckResult: ...


class Part:
    """Streaming hooks that do nothing until overridden (the base of checks and shared parts)."""

    def see_send(self, ev: dict, /) -> None:
        """One send (with or without an application id)."""

    def see_deliver(self, ev: dict, /) -> None:
        """One delivery (with or without an application id)."""

    def see_send_run(self, run: dict, /) -> None:
        """A run line of sends; by default each of its messages goes to see_send."""
        for one in run_messages(run):
            self.see_send(one)

    def see_deliver_run(self, run: dict, /) -> None:
        """A run line of deliveries; by default each of its messages goes to see_deliver."""
        for one in run_messages(run):
            self.see_deliver(one)

    def see_other(self, ev: dict, /) -> None:
        """Any event that is neither a send nor a delivery."""


P = TypeVar("P", bound=Part)


class Check(Part):
    """The base of a checker: made with the run's CheckContext, fed by the hooks, then result()."""

    name: ClassVar[str]
    bound_key: ClassVar[str | None] = None
    unit: ClassVar[str] = ""
    membership: ClassVar[bool] = False

    def __init__(self, ctx: CheckContext) -> None:
        self.ctx = ctx

    def result(self) -> CheckResult:
        raise NotImplementedError


def overrides(part: object, hook: str) -> bool:
    """Does this part do anything with `hook` (a Part that does not override it does nothing)?"""
    return not isinstance(part, Part) or getattr(type(part), hook) is not getattr(Part, hook)
