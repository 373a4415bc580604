"""The in-process fault layer: JGroups' DISCARD, DELAY, DUPL and SHUFFLE in one sans-I/O layer.

It sits between the transport and the reliability protocol and acts on single messages, so it can
do what no packet-level injector can: drop "the first DATA", "3 ACKs from A", one message in the
middle of a batch, or the SYNC-OK of a resync. A rule matches by direction (up = received, down =
sent), peer, message type, seqno range and time window; it acts with probability `p`, skips the
first `after` matches and acts on at most `count`. Actions: drop, delay by `delay_s`, duplicate.
All randomness comes from the rng passed in, so a seeded run replays exactly.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import SettingError
from .events import make_event
from .layer import Action, Down, Layer, Log, Up
from .message import Message
from .protocols import Rng
from .wire import message_type

PROTO = "faults"
ACTIONS = ("drop", "delay", "duplicate")
DIRECTIONS = ("up", "down")


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultRule:
    direction: str = "up"
    peer: str | None = None  # the other end: sender for "up", destination for "down"
    types: frozenset[str] | None = None  # message types ("DATA", "ACK", "SYNC_OK"...); None = all
    p: float = 1.0
    count: int | None = None  # act on at most this many matches; None = unlimited
    after: int = 0  # let the first `after` matches pass untouched
    seqnos: tuple[int, int] | None = None  # inclusive range of protocol seqnos (DATA, ACK)
    start: float | None = None  # rule active from this time...
    until: float | None = None  # ...until this time
    action: str = "drop"
    delay_s: float = 0.0
    jitter_s: float = 0.0  # delay: plus a uniform extra in [0, jitter_s)

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise SettingError("direction", f"must be up or down, got {self.direction!r}")
        if self.action not in ACTIONS:
            raise SettingError("action", f"must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        if not 0.0 <= self.p <= 1.0:
            raise SettingError("p", f"must be between 0 and 1, got {self.p!r}")
        if self.count is not None and self.count < 1:
            raise SettingError("count", f"must be >= 1, got {self.count!r}")
        if self.after < 0:
            raise SettingError("after", f"must be >= 0, got {self.after!r}")
        if self.delay_s < 0 or (self.action == "delay" and self.delay_s == 0 and self.jitter_s == 0):
            raise SettingError("delay_s", f"must be > 0 for a delay rule, got {self.delay_s!r}")
        if self.jitter_s < 0:
            raise SettingError("jitter_s", f"must be >= 0, got {self.jitter_s!r}")
        if self.seqnos is not None and (len(self.seqnos) != 2 or self.seqnos[0] > self.seqnos[1]):
            raise SettingError("seqnos", f"must be [lo, hi] with lo <= hi, got {self.seqnos!r}")

    def describe(self) -> str:
        parts = [self.action, self.direction]
        if self.peer:
            parts.append(("from " if self.direction == "up" else "to ") + self.peer)
        if self.types:
            parts.append("/".join(sorted(self.types)))
        if self.seqnos:
            parts.append(f"seqnos {self.seqnos[0]}-{self.seqnos[1]}")
        if self.p < 1:
            parts.append(f"p={self.p}")
        if self.after:
            parts.append(f"after {self.after}")
        if self.count:
            parts.append(f"count {self.count}")
        if self.action == "delay":
            parts.append(f"{self.delay_s * 1000:g}ms" + (f"+-{self.jitter_s * 1000:g}ms" if self.jitter_s else ""))
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["types"] = sorted(self.types) if self.types else None
        d["seqnos"] = list(self.seqnos) if self.seqnos else None
        return d


@dataclass(slots=True)
class _RuleState:
    rule: FaultRule
    matched: int = 0
    acted: int = 0


@dataclass(order=True, slots=True)
class _Held:
    due: float
    order: int
    direction: str = field(compare=False)
    msg: Message = field(compare=False)


def _seqno_of(msg: Message) -> int | None:
    for header in msg.headers.values():
        # Headers are protocol-specific; those that carry a seqno (DATA, ACK) carry an int.
        seqno: int | None = getattr(header, "seqno", None)
        if seqno is not None:
            return seqno
    return None


class FaultLayer(Layer):
    proto = PROTO

    def __init__(self, local: str, rng: Rng) -> None:
        self.local = local
        self._rng = rng
        self._rules: dict[int, _RuleState] = {}
        self.passing = True  # Layer.passing: no rules; kept by add_rule, remove_rule and clear
        self._next_id = 1
        self._held: list[_Held] = []
        self._held_order = 0
        self.earliest: float | None = None  # when the first held message is due (deadline_clock)
        self.counters: dict[str, int] = {"dropped": 0, "delayed": 0, "duplicated": 0}

    # ---- rule management ----------------------------------------------------------------------

    def add_rule(self, rule: FaultRule) -> int:
        rule_id = self._next_id
        self._next_id += 1
        self._rules[rule_id] = _RuleState(rule)
        self.passing = False
        return rule_id

    def remove_rule(self, rule_id: int) -> None:
        if self._rules.pop(rule_id, None) is None:
            raise KeyError(f"no fault rule {rule_id}")
        self.passing = not self._rules

    def clear(self) -> None:
        self._rules.clear()
        self.passing = True

    def rules(self) -> dict[int, dict[str, Any]]:
        return {rid: {**st.rule.to_dict(), "matched": st.matched, "acted": st.acted} for rid, st in self._rules.items()}

    # ---- message paths ------------------------------------------------------------------------

    def down(self, msg: Message, now: float) -> list[Action]:
        if not self._rules:
            return [Down(msg=msg)]
        return self._apply("down", msg, msg.dest, now)

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        if not self._rules:
            return [Up(msgs=msgs)]
        out: list[Action] = []
        passed: list[Message] = []
        for msg in msgs:
            for action in self._apply("up", msg, msg.src, now):
                if type(action) is Up:
                    passed.extend(action.msgs)
                else:
                    out.append(action)
        if passed:
            out.append(Up(msgs=passed))
        return out

    def _apply(self, direction: str, msg: Message, peer: str, now: float) -> list[Action]:
        mtype = None
        for st in self._rules.values():
            rule = st.rule
            if rule.direction != direction or (rule.peer is not None and rule.peer != peer):
                continue
            if (rule.start is not None and now < rule.start) or (rule.until is not None and now >= rule.until):
                continue
            if rule.count is not None and st.acted >= rule.count:
                continue
            if rule.types is not None:
                mtype = mtype or message_type(msg)
                if mtype not in rule.types:
                    continue
            if rule.seqnos is not None:
                seqno = _seqno_of(msg)
                if seqno is None or not rule.seqnos[0] <= seqno <= rule.seqnos[1]:
                    continue
            st.matched += 1
            if st.matched <= rule.after or (rule.p < 1.0 and self._rng.random() >= rule.p):
                continue
            st.acted += 1
            return self._act(rule, direction, msg, peer, mtype or message_type(msg), now)
        return [self._pass(direction, msg)]

    def _act(self, rule: FaultRule, direction: str, msg: Message, peer: str, mtype: str, now: float) -> list[Action]:
        seqno = _seqno_of(msg)
        if rule.action == "drop":
            self.counters["dropped"] += 1
            return [
                Log(
                    event=make_event(
                        now,
                        self.local,
                        PROTO,
                        "drop",
                        peer=peer,
                        type=mtype,
                        seqno=seqno,
                        reason=f"fault rule: {rule.describe()}",
                    )
                )
            ]
        if rule.action == "duplicate":
            self.counters["duplicated"] += 1
            return [self._pass(direction, msg), self._pass(direction, msg.copy())]
        self.counters["delayed"] += 1
        self._held_order += 1
        delay = rule.delay_s + (self._rng.random() * rule.jitter_s if rule.jitter_s else 0.0)
        heapq.heappush(self._held, _Held(now + delay, self._held_order, direction, msg))
        self.earliest = self._held[0].due
        return []

    @staticmethod
    def _pass(direction: str, msg: Message) -> Action:
        return Down(msg=msg) if direction == "down" else Up(msgs=[msg])

    # ---- timers: release delayed messages -----------------------------------------------------

    def next_deadline(self) -> float | None:
        return self.earliest

    def deadline_clock(self) -> FaultLayer:
        return self

    def on_timer(self, now: float) -> list[Action]:
        out: list[Action] = []
        while self._held and self._held[0].due <= now:
            held = heapq.heappop(self._held)
            out.append(self._pass(held.direction, held.msg))
        self.earliest = self._held[0].due if self._held else None
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"rules": self.rules(), "held": len(self._held), "counters": dict(self.counters)}
