"""What the admin API does to a running node (mixed into node/runtime/node.py's Node): commands to
its stack (views, SYNC, run-time settings), in-process fault rules, and the node's state and
samples as GET /state and GET /samples show them.

Everything here runs on the node's event loop, called by the admin server (node/runtime/admin.py);
after a command the node drains its stack's outboxes and re-arms its timer as after any input.
Settings are validated as a whole before anything changes, and a setting the protocol calls unsafe
here is refused with the key that makes it so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import protocols
from ..errors import SettingError
from ..events import make_event
from ..layer import Command, SetConfig, SyncPeer, ViewChange
from .errors import RequestError
from .transport import TcpTransport
from .workload import SAMPLE_EVERY

if TYPE_CHECKING:
    from ..faultlayer import FaultLayer, FaultRule
    from ..layer import Layer
    from ..protocols import ProtocolConfig
    from ..stack import Stack
    from .config import Address, NodeConfig
    from .ipmcast import IpMulticast
    from .transport import UdpTransport
    from .workload import Delivered, Stream


class NodeControl:
    # The Node's, which sets them in its __init__ and start().
    config: NodeConfig
    name: str
    incarnation: int
    peers: dict[str, Address]
    stack: Stack
    settings: ProtocolConfig
    membership_settings: ProtocolConfig | None
    protocol_layers: list[Layer]
    faults: FaultLayer
    transport: UdpTransport | TcpTransport | None
    ipmcast: IpMulticast | None
    view: dict[str, Any] | None
    streams: dict[int, Stream]
    delivered: Delivered
    now: Callable[[], float]
    _drain: Callable[[float], None]
    _log: Callable[[dict[str, Any]], None]
    _rearm: Callable[[], None]

    # ---- commands (admin) ---------------------------------------------------------------------

    def command(self, cmd: Command) -> None:
        """Give a command to the stack; a local error (ValueError) propagates to the caller."""
        now = self.now()
        try:
            self.stack.command(cmd, now)
        finally:
            self._drain(now)

    def install_view(self, members: list[str], view_id: int | None = None) -> int:
        if view_id is None:
            view_id = (self.view["view_id"] if self.view else 0) + 1
        self.command(ViewChange(members=tuple(members), view_id=view_id))
        self.view = {"members": list(members), "view_id": view_id}
        return view_id

    def sync(self, peer: str) -> None:
        if peer not in self.peers:
            raise RequestError(f"unknown peer {peer!r} (peers: {', '.join(sorted(self.peers)) or 'none'})", "peer")
        cmd = SyncPeer(peer=peer)
        refusals = [why for why in (layer.refusal(cmd) for layer in self.protocol_layers) if why]
        if refusals:
            raise RequestError("; ".join(refusals), None)
        self.command(cmd)

    def set_config(self, values: dict[str, Any]) -> dict[str, Any]:
        """Change settings at run time: the protocol's, and the membership protocol's (GMS) keys
        split off as the scenario's flat `config:` is (compose.split_config). Every key is
        validated before anything changes; the answer is every setting, flat."""
        current = self.settings
        membership = self.membership_settings
        known = {**current.as_dict(), **(membership.as_dict() if membership is not None else {})}
        for key in values:
            if key not in known:
                raise RequestError(f"{key}: unknown protocol setting (known: {', '.join(sorted(known))})", key)
        theirs = membership.as_dict() if membership is not None else {}
        own = {k: v for k, v in values.items() if k not in theirs}
        try:
            updated = current.updated(own) if own else current
            membership_updated = (
                membership.updated({k: v for k, v in values.items() if k in theirs}) if membership is not None else None
            )
        except SettingError as exc:
            raise RequestError(str(exc), exc.key) from None
        self._refuse_unsafe(updated.as_dict(), bool(self._drop_rules()))
        self.command(SetConfig(values=dict(values)))
        self.settings = updated
        self.membership_settings = membership_updated
        self._follow_lossless()
        return {**updated.as_dict(), **(membership_updated.as_dict() if membership_updated is not None else {})}

    def _follow_lossless(self) -> None:
        """A TCP transport never drops while the settings rely on it (the NAKACK2 design: NAKACK2 without
        retransmission); with them changed back at run time it may drop again."""
        if isinstance(self.transport, TcpTransport):
            spec = protocols.get(self.config.protocol)
            self.transport.lossless = spec.needs_lossless_below(self.settings.as_dict())

    def _drop_rules(self) -> list[int]:
        return [rid for rid, rule in self.faults.rules().items() if rule.get("action") == "drop"]

    def _refuse_unsafe(self, settings: dict[str, Any], drops_below: bool) -> None:
        """Settings the protocol calls unsafe here (NAKACK2 without retransmission over UDP or
        with in-process drops below it) are refused, naming the key (ProtocolSpec.unsafe)."""
        unsafe = protocols.get(self.config.protocol).unsafe_settings(settings, self.config.transport, drops_below)
        if unsafe:
            raise RequestError("; ".join(f"{key}: {why}" for key, why in unsafe), unsafe[0][0])

    def add_fault(self, rule: FaultRule) -> int:
        if rule.action == "drop":
            self._refuse_unsafe(self.settings.as_dict(), True)
        rule_id = self.faults.add_rule(rule)
        self._log(
            make_event(self.now(), self.name, "faults", "fault_on", fault=f"rule {rule_id}", detail=rule.describe())
        )
        self._rearm()
        return rule_id

    def remove_fault(self, rule_id: int) -> None:
        self.faults.remove_rule(rule_id)  # KeyError for an unknown id
        self._log(make_event(self.now(), self.name, "faults", "fault_off", fault=f"rule {rule_id}"))

    def clear_faults(self) -> None:
        ids = list(self.faults.rules())
        self.faults.clear()
        now = self.now()
        for rule_id in ids:
            self._log(make_event(now, self.name, "faults", "fault_off", fault=f"rule {rule_id}"))

    # ---- introspection ------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        membership = self.stack.membership()
        return {
            "node": self.name,
            "incarnation": self.incarnation,
            "protocol": self.config.protocol,
            "transport": self.config.transport,
            "now": self.now(),
            "view": self.view
            if membership is None
            else {"members": list(membership.members), "view_id": membership.view_id},
            "membership": None if membership is None else membership.to_dict(),
            # Protocol-neutral: every window and busy reason, each tagged with its layer.
            "windows": [
                {"proto": layer.proto, **w.to_dict()} for layer in self.protocol_layers for w in layer.windows()
            ],
            "busy": [{"proto": layer.proto, "reason": why} for layer in self.protocol_layers for why in layer.busy()],
            # Each layer's own detail, under its name (for people; code reads the two above).
            **{layer.proto: layer.snapshot() for layer in self.stack.layers},
            "streams": [s.to_dict() for s in self.streams.values()],
            **({} if self.ipmcast is None else {"ip_multicast": self.ipmcast.snapshot()}),
        }

    def samples(self) -> dict[str, Any]:
        return {
            "every": SAMPLE_EVERY,
            "sent": {str(s.stream): [list(x) for x in s.samples] for s in self.streams.values()},
            "delivered": self.delivered.samples(),
        }
