"""Failure detection by heartbeats (JGroups' FD_ALL3, without VERIFY_SUSPECT).

Every `heartbeat_interval` this layer sends HEARTBEAT to every other member of its view and checks
when it last heard each of them: a member silent for more than `fd_timeout` is suspected, and all
members that became suspect at one check are announced to GMS in one Suspect, so the coordinator
excludes them in one view. A HEARTBEAT from a suspected member announces Unsuspect. A new view
starts the clock afresh for every member. Heartbeats are counted, not logged. A heartbeat
carries its sender's view (id, coordinator): another coordinator is announced as MergeInfo (two
views that list each other, which MERGE3's INFO to outsiders never sees), and a member one view
behind its coordinator as StaleView (the coordinator sends it the view again).

Only heartbeats count as a sign of life (JGroups' msg_counts_as_heartbeat=false), so detection
does not depend on the application's traffic. Heartbeats go to view members only: a node that a
view left out stops hearing from its former peers and, after fd_timeout, suspects them in turn.

VERIFY_SUSPECT (a second opinion before excluding) is left out: with heartbeats to every member
and one timeout it would only delay exclusion by its own timeout, and a false suspicion is
repaired by MERGE3 like any split.
"""

from __future__ import annotations

from typing import Any

from ..layer import Action, Announce, Command, Leave, Up, ViewChange
from ..message import Message
from .base import GmsLayerBase
from .commands import Left, MergeInfo, StaleView, Suspect, Unsuspect
from .config import GmsConfig
from .header import LOWER_ID, GmsHeader, GmsType


class FdAll3(GmsLayerBase):
    timer_names = ("heartbeat",)

    def __init__(self, local: str, config: GmsConfig) -> None:
        super().__init__(local)
        self.config = config
        self.members: tuple[str, ...] = ()
        self.last_heard: dict[str, float] = {}
        self.suspected: set[str] = set()
        self.stopped = False
        self.coord = ""
        self.view_id = 0

    def command(self, cmd: Command, now: float) -> list[Action]:
        if self._reconfigured(cmd):
            return []
        if isinstance(cmd, ViewChange) and not self.stopped:
            self.members = cmd.members
            self.coord = cmd.coord or (cmd.members[0] if cmd.members else "")
            self.view_id = cmd.view_id
            others = [m for m in cmd.members if m != self.local]
            # Every view starts every member's clock afresh, not only the new members': a member
            # that was in this node's view all along may have left us out of its own view (a
            # one-way split) and stopped heartbeating us; after a merge it starts again, but
            # its silence before the merge must not count (it made views flap forever).
            self.last_heard = {m: now for m in others}
            self.suspected &= set(others)
            if "heartbeat" not in self.timers.at:
                self.timers.set("heartbeat", now + self.config.heartbeat_interval)
        elif isinstance(cmd, Leave):
            self.stopped = True
            self.timers.set("heartbeat", None)
            return [self._send(peer, GmsHeader(GmsType.LEAVE, self.view_id, self.coord)) for peer in self.last_heard]
        return []

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        mine, rest = self._split(msgs, LOWER_ID)
        if not mine:
            return [Up(msgs=msgs)]
        out: list[Action] = []
        for msg, hdr in mine:
            assert isinstance(hdr, GmsHeader)
            if hdr.type is GmsType.LEAVE:
                # A member stopping gracefully: no need to wait fd_timeout for it.
                self._count("rx_LEAVE")
                if msg.src in self.last_heard:
                    out.append(Announce(cmd=Left(peer=msg.src)))
                continue
            if hdr.type is not GmsType.HEARTBEAT:
                rest.append(msg)
                continue
            self._count("gms_heartbeats_rx")
            src = msg.src
            if src in self.last_heard:
                self.last_heard[src] = now
                if src in self.suspected:
                    self.suspected.discard(src)
                    out.append(Announce(cmd=Unsuspect(peer=src)))
                # A heartbeat carries the sender's view: members that disagree on the coordinator
                # are split views (MERGE3's job, found here because they heartbeat each other);
                # one behind on the same coordinator missed a view (the coordinator resends it).
                if hdr.coord and self.coord and hdr.coord != self.coord:
                    out.append(Announce(cmd=MergeInfo(peer=src, coord=hdr.coord, view_id=hdr.view_id)))
                elif hdr.coord == self.coord == self.local and hdr.view_id < self.view_id:
                    out.append(Announce(cmd=StaleView(peer=src)))
        if rest:
            out.append(Up(msgs=rest))
        return out

    def _on_heartbeat(self, now: float) -> list[Action]:
        out: list[Action] = []
        for peer in self.last_heard:
            self._count("gms_heartbeats_tx")
            out.append(self._send(peer, GmsHeader(GmsType.HEARTBEAT, self.view_id, self.coord)))
        late = tuple(
            peer
            for peer, heard in self.last_heard.items()
            if peer not in self.suspected and now - heard > self.config.fd_timeout
        )
        if late:
            self.suspected.update(late)
            self._count("gms_suspicions", len(late))
            out.append(Announce(cmd=Suspect(peers=late)))
        self.timers.set("heartbeat", now + self.config.heartbeat_interval)
        return out

    def check_invariants(self) -> None:
        assert self.suspected <= set(self.last_heard), "a suspect outside the view"
        assert self.local not in self.last_heard, "heartbeats to itself"

    def snapshot(self) -> dict[str, Any]:
        return {"last_heard": dict(self.last_heard), "suspected": sorted(self.suspected)}
