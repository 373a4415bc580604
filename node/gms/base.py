"""What GMS's layers share: counting, events, messages with a GMS header, named deadlines."""

from __future__ import annotations

from ..layer import Action, Command, CountingLayer, Down, Log, SetConfig
from ..message import Message
from ..timers import Deadlines
from .config import GmsConfig
from .header import LOWER_ID, GmsHeader

PROTO = "gms"


class GmsLayerBase(CountingLayer):
    proto = PROTO
    timer_names: tuple[str, ...] = ()
    config: GmsConfig  # every GMS layer holds the settings (each layer its own reference)

    def __init__(self, local: str) -> None:
        self.local = local
        self.counters: dict[str, int] = {}
        self.timers = Deadlines(*self.timer_names)

    def _reconfigured(self, cmd: Command) -> bool:
        """Take a SetConfig's GMS keys (admin POST /config, a scenario's config step); the other
        keys are another protocol's. Each timer takes its new length the next time it is armed
        (the next heartbeat, discovery round, merge round). True if `cmd` was a SetConfig."""
        if not isinstance(cmd, SetConfig):
            return False
        mine = {k: v for k, v in cmd.values.items() if k in GmsConfig.keys()}
        if mine:
            self.config = self.config.updated(mine)
        return True

    def _drop(self, now: float, src: str, type_name: str, reason: str) -> Log:
        """Bad or unwanted input from a peer: counted by type and logged, never raised."""
        return self._log(now, "drop", peer=src, type=type_name, reason=reason)

    def _send(self, dest: str, hdr: GmsHeader, proto_id: int = LOWER_ID) -> Down:
        self._count(f"tx_{hdr.type.name}")
        return Down(msg=Message(self.local, dest, b"", {proto_id: hdr}))

    def _split(self, msgs: list[Message], proto_id: int) -> tuple[list[tuple[Message, object]], list[Message]]:
        """(messages with this id's header, the rest in order)."""
        mine: list[tuple[Message, object]] = []
        rest: list[Message] = []
        for msg in msgs:
            hdr = msg.headers.get(proto_id)
            if hdr is None:
                rest.append(msg)
            else:
                mine.append((msg, hdr))
        return mine, rest

    def next_deadline(self) -> float | None:
        return self.timers.earliest

    def deadline_clock(self) -> Deadlines:
        return self.timers

    def _due(self, now: float) -> list[str]:
        """The names of the deadlines due now, in the fixed order, each cleared."""
        due = [name for name in self.timers.order if self.timers.due(name, now)]
        for name in due:
            self.timers.set(name, None)
        return due

    def on_timer(self, now: float) -> list[Action]:
        out: list[Action] = []
        for name in self._due(now):
            out.extend(getattr(self, f"_on_{name}")(now))
        return out
