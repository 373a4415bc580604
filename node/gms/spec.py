"""GMS's entry in the protocol registry (node/protocols.py): a membership protocol, selected by a
scenario's `membership: gms` (not by `protocol:`). Its discovery, failure detection and MERGE3 layers
sit below the reliable protocol (`below`), GMS itself above it."""

from __future__ import annotations

from ..layer import Layer
from ..protocols import EventMark, ProtocolSpec, Rng
from .config import GmsConfig
from .discovery import Discovery
from .fd import FdAll3
from .fuzz import fuzz_header
from .gms import Gms
from .header import CODEC, LOWER_CODEC, GmsType
from .merge import Merge3


def _below(name: str, config: GmsConfig, rng: Rng, incarnation: int) -> list[Layer]:
    return [Discovery(name, config), FdAll3(name, config), Merge3(name, config, rng)]


def _layers(name: str, config: GmsConfig, rng: Rng, incarnation: int) -> list[Layer]:
    return [Gms(name, config, incarnation)]


SPEC = ProtocolSpec(
    name="gms",
    summary="group membership: discovery, FD_ALL3 heartbeats, MERGE3 and GMS views (JGroups)",
    config=GmsConfig.from_dict,
    layers=_layers,
    below=_below,
    membership=True,
    header=CODEC,
    extra_headers=(LOWER_CODEC,),
    message_types=tuple(t.name for t in GmsType),
    event_kinds={
        "suspect": "a member was suspected: not heard from for fd_timeout (peer)",
        "unsuspect": "a suspected member was heard from again (peer)",
        "join_req_tx": "JOIN sent to the coordinator discovery found (peer)",
        "join_req_rx": "JOIN received (peer = the joiner)",
        "join_rsp_tx": "JOIN_RSP sent to a joiner (peer, view_id, members)",
        "join_rsp_rx": "JOIN_RSP received (peer = the coordinator, view_id, members)",
        "merge": "a merge phase (phase = start | request | response | install | cancel; members, coord, peer)",
        "leave_tx": "a graceful leave: LEAVE_REQ to the coordinator, or a leaving coordinator's last view (peer)",
        "leave_rx": "LEAVE_REQ received by the coordinator (peer = the leaver)",
    },
    default_checks=(),
    fuzz=fuzz_header,
    membership_marks=(
        EventMark(kind="suspect", label="suspects a member (peer)"),
        EventMark(kind="unsuspect", label="unsuspects a member"),
        EventMark(kind="merge", label="merge phase"),
        EventMark(kind="leave_tx", label="leaves"),
    ),
)
