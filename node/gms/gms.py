"""GMS: the group membership service (JGroups' GMS with ClientGmsImpl / CoordGmsImpl).

Theory of operation
-------------------
A view is (view_id, members); the first member is the coordinator. View ids only grow at every
member: a VIEW is installed only if its id is above the current one, and every view a coordinator
makes has the id of its current view plus one (a merged view: above all merged ones).

- Join (a node given Bootstrap(peers)): the node asks discovery for the coordinator. If one answers,
  it sends JOIN_REQ to it and waits `join_timeout` for JOIN_RSP(view, digest); the coordinator adds it
  at the end, installs the new view, sends VIEW to the old members and, once each of them answered
  VIEW_ACK (or after `view_ack_collection_timeout`), JOIN_RSP to the joiner (with the incarnation
  its JOIN_REQ gave; a joiner still waiting for its own JOIN_RSP is not waited for, and gets the
  newest view in it). A joiner installs only a JOIN_RSP for its own incarnation and
  drops every VIEW until then: with fixed names a restarted node gets what its coordinator still
  retransmits to its previous life (JGroups' new address per life makes that impossible). If
  nobody coordinates (concurrent start), the lowest-named node forms a singleton view at once when
  it is the lowest of all initial hosts, or else when every host answered or `join_timeout` has
  passed and it is the lowest of those that answered; the others look again after
  `discovery_timeout` and join it (JGroups' ConcurrentStartupTest). After `max_join_attempts`
  unanswered JOINs, or that many join_timeouts without a coordinator, a node forms a singleton view
  and MERGE3 joins it to the others later.
- Failure (Suspect from the failure detector): a member that is the first unsuspected member of the
  view (the coordinator, or the next member when the coordinator is suspected) installs a view
  without every suspect. A one-way partition A->B therefore makes B's side drop A while A still
  lists B, until A stops hearing B's side in turn.
- Leave (Leave, on SIGTERM): the failure detector sends LEAVE to every member, unreliably (a
  stopping node leaves nothing unacknowledged); the first member left installs the view without
  the leavers one heartbeat interval later (leaves are batched, so a whole cluster stopping at once
  makes no views). A lost LEAVE costs fd_timeout. LEAVE_REQ over UNICAST3 is still understood.
- Suspicion reports: a member whose suspicion is not its own call (it is not the first member left)
  sends SUSPECT to the member that is, which excludes the reported members (no VERIFY_SUSPECT).
- Merge (MergeInfo from MERGE3): a coordinator that learns of views with other coordinators, and is
  lower-named than all of them, leads: it sends MERGE_REQ to each, collects MERGE_RSP(view) for up to
  `merge_timeout`, and installs the union (its own members first, then the others' in order of
  their coordinators) with an id above all of them, sending VIEW (reason merge, with the merge
  digest) to every member. Nobody answering cancels the merge; the next INFO starts another.
- Injection (a ViewChange command from a driver or the admin API, JGroups' INJECT_VIEW): installed
  as given, with an id above the current one, and GMS goes on from there.

GMS's messages (JOIN_REQ, JOIN_RSP, VIEW, VIEW_ACK, LEAVE_REQ, MERGE_REQ, MERGE_RSP, SUSPECT: GMS_ID) ride
the reliable protocol below (UNICAST3), so they arrive once and in order per sender; a stale one
(an old VIEW, an answer to a cancelled merge) is dropped and counted. Every installed view is
announced to the other layers as a ViewChange (node.layer.Announce) and logged as one `view` event.

Digests (JGroups' join digest): the coordinator asks the multicast layer below for the highest
seqno it knows of each sender (a GetDigest query through the stack) when it makes a join view, and
sends it with the VIEW and the JOIN_RSP; a merge leader combines its own with those its MERGE_RSPs
carry (the highest per sender). A joiner's multicast layer starts its tables there. A unicast-only
stack answers nothing, so its digests stay empty. After its first view a node announces
BecomeServer (JGroups' BECOME_SERVER): the multicast layer replays what it queued while joining.

Discovery, failure detection and MERGE3 live in their own modules (discovery.py, fd.py, merge.py);
this one keeps the view state machine (joins, leaves, suspicions, merges, view installation and
digests) in one piece, since every one of those transitions reads and replaces the same view.
"""

from __future__ import annotations

import enum
from dataclasses import replace
from typing import Any

from ..layer import Action, Announce, BecomeServer, Bootstrap, Command, Digest, Down, GetDigest, Leave, Up, ViewChange
from ..message import Message
from ..views import Membership
from .base import GmsLayerBase
from .commands import FindMembers, Left, MembersFound, MergeInfo, StaleView, Suspect, Unsuspect
from .config import GmsConfig
from .header import GMS_ID, GmsHeader, GmsType


class GmsState(enum.Enum):
    IDLE = "idle"  # built, not bootstrapped (and no view injected)
    JOINING = "joining"  # ClientGmsImpl: discovering, or waiting for JOIN_RSP
    MEMBER = "member"  # has a view (coordinator or participant)
    LEFT = "left"  # left gracefully: ignores everything


class PendingJoin:
    """A JOIN_RSP the coordinator holds until the other members acknowledged the join view."""

    __slots__ = ("rsp", "waiting", "deadline", "view_id")

    def __init__(self, rsp: GmsHeader, waiting: set[str], deadline: float) -> None:
        self.rsp = rsp  # updated to each later view, so the joiner gets the newest one
        self.waiting = waiting  # members yet to send VIEW_ACK
        self.deadline = deadline  # when to answer anyway (view_ack_collection_timeout)
        self.view_id = rsp.view_id  # the join view: a VIEW_ACK for it or a later one counts


class Gms(GmsLayerBase):
    timer_names = ("discover", "join", "merge", "leave", "view_ack")

    def __init__(self, local: str, config: GmsConfig, incarnation: int = 0) -> None:
        super().__init__(local)
        self.config = config
        # Sent with JOIN_REQ: a coordinator tells a restarted member (a new incarnation asking to
        # join a view that still lists its old one) from a repeated JOIN_REQ of the same one.
        self.incarnation = incarnation & 0xFFFFFFFF
        self.joined: dict[str, int] = {}  # as coordinator: member -> the incarnation that joined
        # As coordinator: joiner -> the JOIN_RSP held for it (PendingJoin). JGroups' view ack
        # collection: a joiner multicasts as soon as it has its view, so every other member must
        # have installed that view first, or it would take the joiner's first multicasts into the
        # table of the joiner's previous life (with fixed names a restarted node's seqnos start
        # again at 1) and deliver them twice.
        self.join_pending: dict[str, PendingJoin] = {}
        self.state = GmsState.IDLE
        self.view_id = 0
        self.members: tuple[str, ...] = ()
        self.suspects: set[str] = set()
        self.leavers: set[str] = set()  # members that said LEAVE, excluded at the "leave" deadline
        self.peers: tuple[str, ...] = ()
        # joining
        self.join_started = 0.0
        self.join_attempts = 0
        self.join_target = ""
        self.discovering = False
        # merging (leader side)
        self.merge_seq = 0
        self.merge_id = 0  # the merge this node leads now, 0 = none
        self.merge_waiting: set[str] = set()
        self.merge_views: dict[str, tuple[int, tuple[str, ...]]] = {}
        self.candidates: dict[str, int] = {}  # other coordinators heard of -> their view id
        self.highest_installed = 0
        self.merge_digests: dict[str, Digest] = {}
        # False until the first view: then BecomeServer is announced once.
        self.served = False

    # ---- helpers ------------------------------------------------------------------------------

    @property
    def coord(self) -> str:
        return self.members[0] if self.members else ""

    @property
    def is_coord(self) -> bool:
        return self.state is GmsState.MEMBER and self.coord == self.local

    def _gms(self, dest: str, hdr: GmsHeader) -> Down:
        return self._send(dest, hdr, GMS_ID)

    def _digest(self, members: tuple[str, ...]) -> Digest:
        """The multicast layer's digest for a new view, restricted to its members ("" when the
        stack has no multicast layer)."""
        answer = self.ask(GetDigest())
        if not answer:
            return ()
        return tuple((s, n) for s, n in answer if s in members)

    def _served(self) -> list[Action]:
        """BecomeServer after the first view installed here (join, singleton, merge or injected)."""
        if self.served or self.local not in self.members:
            return []
        self.served = True
        return [Announce(cmd=BecomeServer())]

    def _install(
        self, now: float, members: tuple[str, ...], view_id: int, reason: str, digest: Digest = ()
    ) -> list[Action]:
        """Install a view here: log it, tell the other layers."""
        self.state = GmsState.MEMBER
        self.members = members
        self.view_id = view_id
        self.highest_installed = max(self.highest_installed, view_id)
        self.suspects &= set(members)
        self.leavers &= set(members)
        self.discovering = False
        self.join_target = ""
        self.timers.set("discover", None)
        self.timers.set("join", None)
        if self.local not in members or self.coord != self.local:
            self._end_merge()
        self._count("gms_views")
        self._prune_join_pending(members, reason)
        coord = self.coord
        return [
            self._log(
                now,
                "view",
                members=list(members),
                view_id=view_id,
                coord=coord,
                reason=reason,
                digest=[f"{s}:{n}" for s, n in digest] or None,
            ),
            Announce(
                cmd=ViewChange(members=members, view_id=view_id, coord=coord, reason=reason, digest=digest, logged=True)
            ),
            *self._served(),
        ]

    def _make_view(
        self,
        now: float,
        members: tuple[str, ...],
        reason: str,
        view_id: int | None = None,
        joiner: str = "",
        digest: Digest = (),
    ) -> list[Action]:
        """As the coordinator of the new view: install it and send VIEW to the other members (a
        joiner gets JOIN_RSP instead)."""
        vid = self.view_id + 1 if view_id is None else view_id
        out = self._install(now, members, vid, reason, digest)
        hdr = GmsHeader(GmsType.VIEW, vid, members[0], members, reason=reason, digest=digest)
        # A joiner still waiting for its JOIN_RSP gets this view in it instead (it drops VIEWs).
        out.extend(self._gms(m, hdr) for m in members if m != self.local and m != joiner and m not in self.join_pending)
        return out

    def _singleton(self, now: float) -> list[Action]:
        return self._install(now, (self.local,), self.view_id + 1, "singleton")

    # ---- commands -----------------------------------------------------------------------------

    def command(self, cmd: Command, now: float) -> list[Action]:
        if self._reconfigured(cmd):
            return []
        if self.state is GmsState.LEFT:
            return []
        if isinstance(cmd, ViewChange):
            if cmd.logged:
                return []  # announced by another layer (none does today)
            return self._inject(cmd, now)
        if isinstance(cmd, Bootstrap):
            self.peers = tuple(sorted(p for p in set(cmd.peers) if p != self.local))
            if self.state is GmsState.IDLE:
                self.state = GmsState.JOINING
                self.join_started = now
                self.join_attempts = 0
                # Discovery gets the peers after this command reached it: start on the next timer.
                self.timers.set("discover", now)
            return []
        if isinstance(cmd, MembersFound):
            return self._on_found(cmd, now)
        if isinstance(cmd, Suspect):
            return self._on_suspect(cmd, now)
        if isinstance(cmd, Unsuspect):
            if cmd.peer in self.suspects:
                self.suspects.discard(cmd.peer)
                return [self._log(now, "unsuspect", peer=cmd.peer)]
            return []
        if isinstance(cmd, MergeInfo):
            return self._on_merge_info(cmd, now)
        if isinstance(cmd, StaleView):
            if self.is_coord and cmd.peer in self.members:
                self._count("views_resent")
                hdr = GmsHeader(GmsType.VIEW, self.view_id, self.local, self.members, reason="resend")
                return [self._gms(cmd.peer, hdr)]
            return []
        if isinstance(cmd, Leave):
            return self._leave(now)
        if isinstance(cmd, Left):
            if cmd.peer in self.members and cmd.peer != self.local:
                self.leavers.add(cmd.peer)
                # Leaves are batched for one heartbeat interval (JGroups' view handler batches
                # them too): a whole cluster stopping at once then makes no views, and so sends
                # no reliable message that a stopping peer would leave unacknowledged.
                self.timers.lower("leave", now + self.config.heartbeat_interval)
                return [self._log(now, "leave_rx", peer=cmd.peer)]
            return []
        return []

    def _inject(self, cmd: ViewChange, now: float) -> list[Action]:
        members = tuple(dict.fromkeys(cmd.members))
        vid = max(cmd.view_id, self.view_id + 1)
        self.state = GmsState.MEMBER if members else GmsState.IDLE
        self.members = members
        self.view_id = vid
        self.highest_installed = max(self.highest_installed, vid)
        self.suspects &= set(members)
        self.leavers &= set(members)  # a leaver the injected view leaves out has left
        self.discovering = False
        self.timers.set("discover", None)
        self.timers.set("join", None)
        self._end_merge()
        self._count("gms_views")
        self._prune_join_pending(members, "inject")
        coord = self.coord
        view = ViewChange(members=members, view_id=vid, coord=coord, reason="inject", digest=cmd.digest, logged=True)
        return [
            self._log(now, "view", members=list(members), view_id=vid, coord=coord, reason="inject"),
            Announce(cmd=view, instead=True),
            *self._served(),
        ]

    # ---- joining ------------------------------------------------------------------------------

    def _on_discover(self, now: float) -> list[Action]:
        if self.state is not GmsState.JOINING:
            return []
        if not self.peers:
            return self._singleton(now)
        self.discovering = True
        return [Announce(cmd=FindMembers(peers=self.peers))]

    def _on_found(self, found: MembersFound, now: float) -> list[Action]:
        if self.state is not GmsState.JOINING or not self.discovering:
            return []
        self.discovering = False
        coords = {coord: vid for _peer, coord, vid in found.responses if coord and coord != self.local}
        if coords:
            # The coordinator of the newest view; ties go to the lowest name.
            target = min(coords, key=lambda c: (-coords[c], c))
            self.join_target = target
            self.timers.set("join", now + self.config.join_timeout)
            return [
                self._log(now, "join_req_tx", peer=target),
                self._gms(target, GmsHeader(GmsType.JOIN_REQ, merge_id=self.incarnation)),
            ]
        answered = {peer for peer, _coord, _vid in found.responses}
        waited = now - self.join_started
        lowest_of_all = self.local < self.peers[0]
        lowest_answered = all(self.local < p for p in answered)
        everyone = answered >= set(self.peers)
        if lowest_of_all or (lowest_answered and (everyone or waited >= self.config.join_timeout)):
            return self._singleton(now)
        if waited >= self.config.join_timeout * self.config.max_join_attempts:
            return self._singleton(now)
        self.timers.set("discover", now + self.config.discovery_timeout)
        return []

    def _on_join(self, now: float) -> list[Action]:
        """No JOIN_RSP within join_timeout."""
        if self.state is not GmsState.JOINING:
            return []
        self.join_attempts += 1
        self.join_target = ""
        if self.join_attempts >= self.config.max_join_attempts:
            return self._singleton(now)
        return self._on_discover(now)

    # ---- messages -----------------------------------------------------------------------------

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        mine, rest = self._split(msgs, GMS_ID)
        if not mine:
            return [Up(msgs=msgs)]
        out: list[Action] = []
        if rest:
            out.append(Up(msgs=rest))
        for msg, hdr in mine:
            assert isinstance(hdr, GmsHeader)
            self._count(f"rx_{hdr.type.name}")
            if self.state is GmsState.LEFT:
                continue
            handler = self._HANDLERS.get(hdr.type)
            if handler is None:
                out.append(self._drop(now, msg.src, hdr.type.name, "not a GMS message"))
            else:
                out.extend(handler(self, msg.src, hdr, now))
        return out

    def _on_join_req(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "join_req_rx", peer=src)]
        if not self.is_coord:
            out.append(self._drop(now, src, "JOIN_REQ", "not the coordinator"))
            return out
        pending = self.join_pending.get(src)
        if pending is not None and pending.rsp.merge_id == hdr.merge_id:
            return out  # a repeated JOIN_REQ: its answer waits for the members' VIEW_ACKs
        if src in self.members and self.joined.get(src, hdr.merge_id) != hdr.merge_id:
            # A new incarnation of a member still in the view (a restart faster than fd_timeout):
            # its old incarnation leaves first (JGroups would see two addresses), so every layer
            # forgets the old one's state (NAKACK2 its table, whose seqnos start again at 1).
            # Only when this coordinator added another incarnation: a late JOIN_REQ of a member
            # that came in otherwise (a merge after a concurrent start) just gets the view.
            out.extend(self._make_view(now, tuple(m for m in self.members if m != src), "leave"))
        if src not in self.members:
            # The digest is taken before the view goes in: the joiner is owed what follows it.
            # The joiner has sent nothing yet (it holds its multicasts until BecomeServer), so it
            # has no entry: every table for it starts at 0 (JGroups sets new members to 0).
            members = (*self.members, src)
            digest = tuple(item for item in self._digest(members) if item[0] != src)
            out.extend(self._make_view(now, members, "join", joiner=src, digest=digest))
            new_view = True
        else:
            digest = self._digest(self.members)  # a repeated JOIN: the view it is already in
            new_view = False
        self.joined[src] = hdr.merge_id
        # The joiner's incarnation goes back with the answer: a restarted joiner drops a JOIN_RSP
        # its coordinator still retransmits to the life before it.
        rsp = GmsHeader(GmsType.JOIN_RSP, self.view_id, self.coord, self.members, hdr.merge_id, digest=digest)
        # Joiners still waiting for their own JOIN_RSP cannot acknowledge: it will carry this view.
        waiting = set(self.members) - {self.local, src} - set(self.join_pending)
        if new_view and waiting:
            self.join_pending[src] = PendingJoin(rsp, waiting, now + self.config.view_ack_collection_timeout)
            self.timers.lower("view_ack", now + self.config.view_ack_collection_timeout)
            return out
        out.extend(self._join_rsp(now, src, rsp))
        return out

    def _join_rsp(self, now: float, joiner: str, rsp: GmsHeader) -> list[Action]:
        return [
            self._log(now, "join_rsp_tx", peer=joiner, view_id=rsp.view_id, members=list(rsp.members)),
            self._gms(joiner, rsp),
        ]

    def _on_view_ack_msg(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        self._count("view_acks")
        for pending in self.join_pending.values():
            if hdr.view_id >= pending.view_id:
                pending.waiting.discard(src)
        return self._answer_joiners(now, expired=False)

    def _on_view_ack(self, now: float) -> list[Action]:
        """view_ack_collection_timeout: answer the joiners whose members did not all acknowledge."""
        return self._answer_joiners(now, expired=True)

    def _answer_joiners(self, now: float, expired: bool) -> list[Action]:
        """JOIN_RSP to each joiner whose view every other member acknowledged (or, `expired`,
        whose wait is over), and the timer set for the earliest wait left."""
        out: list[Action] = []
        for joiner, pending in list(self.join_pending.items()):
            if not pending.waiting or (expired and pending.deadline <= now):
                del self.join_pending[joiner]
                if pending.waiting:
                    self._count("view_ack_timeouts")
                out.extend(self._join_rsp(now, joiner, pending.rsp))
        self.timers.set("view_ack", min((p.deadline for p in self.join_pending.values()), default=None))
        return out

    def _prune_join_pending(self, members: tuple[str, ...], reason: str) -> None:
        """After a view: a waiting joiner's JOIN_RSP carries this view (it drops VIEWs until
        then), only members are waited for, and only joiners still members are answered while
        this node coordinates. After a merge or an injected view nobody is: the join digest
        would not cover the other side's senders, so those joiners ask again after join_timeout
        (a member's repeated JOIN_REQ gets the view with a digest of then)."""
        if not self.join_pending:
            return
        if reason in ("merge", "inject") or self.coord != self.local:  # (the view is installed)
            self.join_pending = {}
            return
        keep = set(members)
        for joiner in [j for j in self.join_pending if j not in keep]:
            del self.join_pending[joiner]
        for pending in self.join_pending.values():
            pending.rsp = replace(pending.rsp, view_id=self.view_id, coord=self.local, members=members)
            pending.waiting &= keep

    def _on_join_rsp(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "join_rsp_rx", peer=src, view_id=hdr.view_id, members=list(hdr.members))]
        if self.local not in hdr.members or not hdr.members or hdr.coord != hdr.members[0]:
            out.append(self._drop(now, src, "JOIN_RSP", "not a view with this node"))
            return out
        if hdr.merge_id != self.incarnation:
            out.append(self._drop(now, src, "JOIN_RSP", "for an earlier incarnation"))
            return out
        if hdr.view_id <= self.highest_installed:
            out.append(self._drop(now, src, "JOIN_RSP", "stale view"))
            return out
        out.extend(self._install(now, hdr.members, hdr.view_id, "join", hdr.digest))
        return out

    def _on_view(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        if self.state is GmsState.JOINING:
            # A joiner's first view is its JOIN_RSP (with the join digest); a VIEW before it was
            # meant for this node's previous incarnation (its coordinator's retransmission backlog):
            # installed, the layers above would start their tables and release held multicasts to it.
            return [self._drop(now, src, "VIEW", "joining: a view for an earlier incarnation")]
        if self.local not in hdr.members or hdr.coord != hdr.members[0]:
            return [self._drop(now, src, "VIEW", "not a member, or the coordinator is not the first member")]
        if hdr.view_id <= self.view_id or hdr.view_id <= self.highest_installed:
            return [self._drop(now, src, "VIEW", "stale view")]
        out = self._install(now, hdr.members, hdr.view_id, hdr.reason or "view", hdr.digest)
        if hdr.reason == "join":
            # Installed: the coordinator may now let the joiner multicast (see join_pending).
            out.append(self._gms(src, GmsHeader(GmsType.VIEW_ACK, hdr.view_id, hdr.coord)))
        return out

    def _on_leave_req(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "leave_rx", peer=src)]
        if not self.is_coord or src not in self.members:
            out.append(self._drop(now, src, "LEAVE_REQ", "not the coordinator of its view"))
            return out
        out.extend(self._make_view(now, tuple(m for m in self.members if m != src), "leave"))
        return out

    def _on_merge_req(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "merge", phase="request", peer=src, coord=src)]
        if not self.is_coord or src >= self.local:
            out.append(self._drop(now, src, "MERGE_REQ", "not a coordinator, or not led by a lower one"))
            return out
        rsp = GmsHeader(
            GmsType.MERGE_RSP,
            self.view_id,
            self.local,
            self.members,
            merge_id=hdr.merge_id,
            digest=self._digest(self.members),
        )
        out.append(self._gms(src, rsp))
        return out

    def _on_merge_rsp(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        if not self.merge_id or hdr.merge_id != self.merge_id or src not in self.merge_waiting:
            return [self._drop(now, src, "MERGE_RSP", "no such merge running")]
        self.merge_waiting.discard(src)
        self.merge_views[src] = (hdr.view_id, hdr.members)
        self.merge_digests[src] = hdr.digest
        out: list[Action] = [self._log(now, "merge", phase="response", peer=src, view_id=hdr.view_id)]
        if not self.merge_waiting:
            out.extend(self._install_merge(now))
        return out

    # ---- failure ------------------------------------------------------------------------------

    def _on_suspect(self, cmd: Suspect, now: float) -> list[Action]:
        out: list[Action] = []
        for peer in cmd.peers:
            if peer in self.members and peer not in self.suspects:
                self.suspects.add(peer)
                out.append(self._log(now, "suspect", peer=peer))
        if self.state is not GmsState.MEMBER:
            return out
        out.extend(self._exclude(now, set(), "suspect"))
        alive = self._alive(set())
        if alive and alive[0] != self.local and cmd.peers:
            # Not this node's call: tell the member that would act (the coordinator, or the next
            # member if the coordinator is suspected). It trusts the report (no VERIFY_SUSPECT).
            hdr = GmsHeader(GmsType.SUSPECT, self.view_id, self.coord, tuple(p for p in cmd.peers if p in self.members))
            if hdr.members:
                out.append(self._gms(alive[0], hdr))
        return out

    def _alive(self, more: set[str]) -> tuple[str, ...]:
        gone = self.suspects | self.leavers | more
        return tuple(m for m in self.members if m not in gone)

    def _exclude(self, now: float, more: set[str], reason: str) -> list[Action]:
        """If this node is the first member not suspected, gone or reported, install the view
        without them."""
        alive = self._alive(more)
        if alive and alive[0] == self.local and len(alive) < len(self.members):
            return self._make_view(now, alive, reason)
        return []

    def _on_leave(self, now: float) -> list[Action]:
        if self.state is not GmsState.MEMBER:
            return []
        return self._exclude(now, set(), "leave")

    def _on_suspect_msg(self, src: str, hdr: GmsHeader, now: float) -> list[Action]:
        if self.state is not GmsState.MEMBER or src not in self.members:
            return [self._drop(now, src, "SUSPECT", "not from a member of this view")]
        reported = set(hdr.members) & set(self.members) - {self.local, src}
        return self._exclude(now, reported, "suspect")

    # ---- merging ------------------------------------------------------------------------------

    def _on_merge_info(self, info: MergeInfo, now: float) -> list[Action]:
        if not self.is_coord or info.coord == self.local:
            return []
        self.candidates[info.coord] = max(info.view_id, self.candidates.get(info.coord, 0))
        if self.merge_id or any(c < self.local for c in self.candidates):
            # A merge is running, or a lower coordinator will lead this one.
            self.candidates = {c: v for c, v in self.candidates.items() if c > self.local}
            return []
        self.merge_seq += 1
        self.merge_id = self.merge_seq
        others = tuple(sorted(self.candidates))
        self.candidates = {}
        self.merge_waiting = set(others)
        self.merge_views = {self.local: (self.view_id, self.members)}
        self.timers.set("merge", now + self.config.merge_timeout)
        out: list[Action] = [self._log(now, "merge", phase="start", members=list(others), coord=self.local)]
        req = GmsHeader(GmsType.MERGE_REQ, self.view_id, self.local, merge_id=self.merge_id)
        out.extend(self._gms(c, req) for c in others)
        return out

    def _on_merge(self, now: float) -> list[Action]:
        """merge_timeout: merge with those who answered, or give up."""
        if not self.merge_id:
            return []
        if len(self.merge_views) > 1:
            return self._install_merge(now)
        missing = sorted(self.merge_waiting)
        self._end_merge()
        return [self._log(now, "merge", phase="cancel", members=missing, reason="no MERGE_RSP")]

    def _install_merge(self, now: float) -> list[Action]:
        views = self.merge_views
        views[self.local] = (self.view_id, self.members)  # views installed meanwhile count too
        order = [self.local] + sorted(c for c in views if c != self.local)
        members: list[str] = []
        for coord in order:
            members.extend(m for m in views[coord][1] if m not in members)
        vid = max(v for v, _m in views.values()) + 1
        # The merge digest: the highest seqno any side knows of each sender (JGroups' MergeData).
        highest: dict[str, int] = {}
        for part in (self._digest(tuple(members)), *self.merge_digests.values()):
            for sender, seqno in part:
                if sender in members and seqno > highest.get(sender, -1):
                    highest[sender] = seqno
        digest = tuple(sorted(highest.items()))
        self._end_merge()
        self._count("gms_merges")
        out: list[Action] = [self._log(now, "merge", phase="install", members=members, coord=self.local, view_id=vid)]
        out.extend(self._make_view(now, tuple(members), "merge", vid, digest=digest))
        return out

    def _end_merge(self) -> None:
        self.merge_id = 0
        self.merge_waiting = set()
        self.merge_views = {}
        self.merge_digests = {}
        self.timers.set("merge", None)

    # ---- leaving ------------------------------------------------------------------------------

    def _leave(self, now: float) -> list[Action]:
        """The failure detector below UNICAST3 sends LEAVE to every other member, unreliably: a
        stopping node must leave no message unacknowledged in its windows (a lost LEAVE costs
        fd_timeout). The members exclude it one heartbeat interval later."""
        out: list[Action] = []
        if self.state is GmsState.MEMBER and len(self.members) > 1:
            rest = tuple(m for m in self.members if m != self.local)
            out.append(self._log(now, "leave_tx", peer=self.coord if not self.is_coord else rest[0]))
        self.state = GmsState.LEFT
        self._end_merge()
        self.join_pending = {}
        for name in self.timer_names:
            self.timers.set(name, None)
        return out

    # ---- views for the outside ----------------------------------------------------------------

    def membership(self) -> Membership:
        return Membership(
            view_id=self.view_id,
            coord=self.coord,
            members=self.members,
            suspects=tuple(sorted(self.suspects)),
            is_coord=self.is_coord,
        )

    def busy(self) -> list[str]:
        if self.state is GmsState.JOINING:
            return [f"joining ({self.join_target or 'discovering'})"]
        if self.merge_id:
            return [f"merge {self.merge_id} waiting for {', '.join(sorted(self.merge_waiting))}"]
        return [
            f"JOIN_RSP to {joiner} waiting for VIEW_ACK from {', '.join(sorted(pending.waiting))}"
            for joiner, pending in sorted(self.join_pending.items())
        ]

    def check_invariants(self) -> None:
        assert len(set(self.members)) == len(self.members), f"a member twice in {self.members}"
        assert self.view_id == self.highest_installed, f"view id {self.view_id} below {self.highest_installed}"
        assert self.suspects <= set(self.members), "a suspect outside the view"
        assert self.leavers <= set(self.members), "a leaver outside the view"
        assert not self.merge_id or self.is_coord, "a merge led by a non-coordinator"
        assert not self.join_pending or self.is_coord, "a join answered by a non-coordinator"
        assert set(self.join_pending) <= set(self.members), "a pending joiner outside the view"
        assert self.state is not GmsState.MEMBER or self.members, "a member without a view"

    def snapshot(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            **self.membership().to_dict(),
            "merge": {"id": self.merge_id, "waiting": sorted(self.merge_waiting)} if self.merge_id else None,
            "counters": dict(self.counters),
        }

    _HANDLERS = {
        GmsType.JOIN_REQ: _on_join_req,
        GmsType.JOIN_RSP: _on_join_rsp,
        GmsType.VIEW: _on_view,
        GmsType.LEAVE_REQ: _on_leave_req,
        GmsType.MERGE_REQ: _on_merge_req,
        GmsType.MERGE_RSP: _on_merge_rsp,
        GmsType.SUSPECT: _on_suspect_msg,
        GmsType.VIEW_ACK: _on_view_ack_msg,
    }
