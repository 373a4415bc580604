"""The commands GMS's layers hand each other through the stack (node.layer.Announce).

The drivers give the stack ViewChange (an injected view), Bootstrap (the initial hosts) and Leave
(graceful stop), all in node/layer.py; these are internal to GMS.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..layer import Command


@dataclass(frozen=True, slots=True, kw_only=True)
class FindMembers(Command):
    """GMS -> discovery: run one discovery round among `peers`."""

    peers: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MembersFound(Command):
    """Discovery -> GMS: the answers of one round, (peer, coordinator or "", view_id) each."""

    responses: tuple[tuple[str, str, int], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Suspect(Command):
    """Failure detection -> GMS: members not heard from for fd_timeout."""

    peers: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsuspect(Command):
    """Failure detection -> GMS: a suspected member was heard from again."""

    peer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeInfo(Command):
    """MERGE3 -> GMS: `peer`, outside this node's view, is in a view coordinated by `coord`."""

    peer: str
    coord: str
    view_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StaleView(Command):
    """Failure detection -> GMS: a member's heartbeat names this node's view coordinator but an
    older view id (it missed a VIEW, e.g. a restarted node that took a stale one from its old
    incarnation's backlog): the coordinator sends it the current view again."""

    peer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Left(Command):
    """Failure detection -> GMS: a member said LEAVE (a graceful stop)."""

    peer: str
