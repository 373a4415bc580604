"""MERGE3: tell peers outside the view about it, so that split views find each other.

Every `merge_interval` to 1.5 x `merge_interval` (seeded jitter, so nodes do not fire in step) a
member with a view sends INFO(coordinator, view_id, members) to every configured peer that is not
in its view. A node receiving INFO about a view with another coordinator announces MergeInfo to
GMS, whose coordinator decides whether it leads a merge (the lowest coordinator leads). INFO is
unreliable and sits below the reliable protocol (header id LOWER_ID): a lost one is sent again at
the next interval.
"""

from __future__ import annotations

from typing import Any

from ..layer import Action, Announce, Bootstrap, Command, Leave, Up, ViewChange
from ..message import Message
from ..protocols import Rng
from .base import GmsLayerBase
from .commands import MergeInfo
from .config import GmsConfig
from .header import LOWER_ID, GmsHeader, GmsType


class Merge3(GmsLayerBase):
    timer_names = ("info",)

    def __init__(self, local: str, config: GmsConfig, rng: Rng) -> None:
        super().__init__(local)
        self.config = config
        self.rng = rng
        self.peers: tuple[str, ...] = ()
        self.members: tuple[str, ...] = ()
        self.coord = ""
        self.view_id = 0
        self.stopped = False

    def _interval(self) -> float:
        return self.config.merge_interval * (1.0 + 0.5 * self.rng.random())

    def command(self, cmd: Command, now: float) -> list[Action]:
        if self._reconfigured(cmd):
            return []
        if isinstance(cmd, Bootstrap):
            self.peers = tuple(p for p in cmd.peers if p != self.local)
        elif isinstance(cmd, ViewChange) and not self.stopped:
            self.members = cmd.members
            self.coord = cmd.coord or (cmd.members[0] if cmd.members else "")
            self.view_id = cmd.view_id
            if "info" not in self.timers.at:
                self.timers.set("info", now + self._interval())
        elif isinstance(cmd, Leave):
            self.stopped = True
            self.timers.set("info", None)
        return []

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        mine, rest = self._split(msgs, LOWER_ID)
        if not mine:
            return [Up(msgs=msgs)]
        out: list[Action] = []
        for msg, hdr in mine:
            assert isinstance(hdr, GmsHeader)
            if hdr.type is not GmsType.INFO:
                rest.append(msg)
                continue
            self._count("rx_INFO")
            if not hdr.coord or hdr.coord not in hdr.members:
                out.append(self._drop(now, msg.src, "INFO", "no coordinator among its members"))
            elif self.coord and hdr.coord != self.coord:
                out.append(Announce(cmd=MergeInfo(peer=msg.src, coord=hdr.coord, view_id=hdr.view_id)))
        if rest:
            out.append(Up(msgs=rest))
        return out

    def _on_info(self, now: float) -> list[Action]:
        hdr = GmsHeader(GmsType.INFO, self.view_id, self.coord, self.members)
        out: list[Action] = [self._send(p, hdr) for p in self.peers if p not in self.members]
        self.timers.set("info", now + self._interval())
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"peers": list(self.peers), "outside": [p for p in self.peers if p not in self.members]}
