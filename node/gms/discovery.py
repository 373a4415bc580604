"""Discovery (JGroups' PING / TCPPING): find the coordinator among the configured initial hosts.

GMS announces FindMembers(peers) when a node starts (and again between join attempts). This layer
sends GET_MBRS_REQ to every peer and collects GET_MBRS_RSP(coordinator, view_id): a node with a view
answers with its view's coordinator, a node still joining with "". The round ends as soon as a
coordinator other than this node answers (JGroups' break_on_coord_rsp), when every peer answered,
or after `discovery_timeout`; then it announces MembersFound to GMS, which decides (join that
coordinator, wait for the lowest node to form the group, or form a singleton).

Messages are unreliable and sit below the reliable protocol (header id LOWER_ID): a lost request or
answer only makes a round end by its timeout.
"""

from __future__ import annotations

from typing import Any

from ..layer import Action, Announce, Command, Up, ViewChange
from ..message import Message
from .base import GmsLayerBase
from .commands import FindMembers, MembersFound
from .config import GmsConfig
from .header import LOWER_ID, GmsHeader, GmsType


class Discovery(GmsLayerBase):
    timer_names = ("round",)

    def __init__(self, local: str, config: GmsConfig) -> None:
        super().__init__(local)
        self.config = config
        self.peers: tuple[str, ...] = ()
        self.coord = ""  # the coordinator of this node's view, "" before it has one
        self.view_id = 0
        self.responses: dict[str, tuple[str, int]] | None = None  # None: no round running

    def command(self, cmd: Command, now: float) -> list[Action]:
        if self._reconfigured(cmd):
            return []
        if isinstance(cmd, ViewChange):
            self.coord = cmd.coord or (cmd.members[0] if cmd.members else "")
            self.view_id = cmd.view_id
        elif isinstance(cmd, FindMembers):
            self.peers = tuple(p for p in cmd.peers if p != self.local)
            self.responses = {}
            self.timers.set("round", now + self.config.discovery_timeout)
            return [self._send(p, GmsHeader(GmsType.GET_MBRS_REQ)) for p in self.peers]
        return []

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        mine, rest = self._split(msgs, LOWER_ID)
        if not mine:
            return [Up(msgs=msgs)]
        out: list[Action] = []
        for msg, hdr in mine:
            assert isinstance(hdr, GmsHeader)
            if hdr.type is GmsType.GET_MBRS_REQ:
                self._count("rx_GET_MBRS_REQ")
                out.append(self._send(msg.src, GmsHeader(GmsType.GET_MBRS_RSP, self.view_id, self.coord)))
            elif hdr.type is GmsType.GET_MBRS_RSP:
                self._count("rx_GET_MBRS_RSP")
                out.extend(self._on_rsp(msg.src, hdr, now))
            else:
                rest.append(msg)  # heartbeats and INFO, for the layers above
        if rest:
            out.append(Up(msgs=rest))
        return out

    def _on_rsp(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        if src not in self.peers:
            return [self._drop(now, src, "GET_MBRS_RSP", "not an initial host")]
        if self.responses is None:
            self._count("rx_late_GET_MBRS_RSP")  # the round ended at the first coordinator's answer
            return []
        self.responses[src] = (hdr.coord, hdr.view_id)
        found_coord = hdr.coord and hdr.coord != self.local
        if found_coord or len(self.responses) == len(self.peers):
            return self._finish()
        return []

    def _on_round(self, now: float) -> list[Action]:
        return self._finish() if self.responses is not None else []

    def _finish(self) -> list[Action]:
        responses = self.responses or {}
        self.responses = None
        self.timers.set("round", None)
        found = tuple(sorted((peer, coord, view_id) for peer, (coord, view_id) in responses.items()))
        return [Announce(cmd=MembersFound(responses=found))]

    def busy(self) -> list[str]:
        return ["discovery round running"] if self.responses is not None else []

    def check_invariants(self) -> None:
        assert self.responses is None or set(self.responses) <= set(self.peers), "answer from a non-peer"
        assert (self.responses is None) == (self.timers.get("round") is None), "round and its deadline disagree"

    def snapshot(self) -> dict[str, Any]:
        return {
            "peers": list(self.peers),
            "round": None if self.responses is None else sorted(self.responses),
            "counters": dict(self.counters),
        }
