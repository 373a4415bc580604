"""The protocol registry: one spec per protocol, the only place the rest of the code learns what a
protocol is.

A spec says how to build the protocol's layers from its settings, which message types and event
kinds it has, whether it multicasts, which checks judge it by default, and which planted bugs
(mutants) it carries. compose.build_stack, the runtime, the scenario parser, the harness and the
pipeline read specs, never a protocol's package, so adding a protocol is its package plus one
line in BUILTIN below (docs/extending.md).

Specs are loaded on first use, not at import, so a protocol package may import this module, and
`get(name)` of a built-in protocol imports only that protocol's package (a run of one protocol does
not pay for importing the others); anything that lists protocols loads them all. A protocol kept
outside this repository is loaded by naming its spec module in the environment variable
SPLITBRAIN_PROTOCOLS (comma-separated); node processes inherit it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Protocol

from .errors import BadInput
from .events import CORE_EVENT_KINDS, OVERHEAD_KINDS, PER_MESSAGE_KINDS
from .layer import Layer
from .wire import HeaderCodec, register_header

# The checks a protocol is judged by when a scenario names none (harness.checks; windows_synced
# only when a scenario asks: a run that stops mid-stream leaves windows legitimately open).
UNICAST_CHECKS = ("fifo", "no_duplicates", "no_loss")


class RegistryError(BadInput, ValueError):
    """A spec module (BUILTIN or SPLITBRAIN_PROTOCOLS) cannot be loaded."""


class ProtocolConfig(Protocol):
    """What the registry needs of a protocol's validated settings object."""

    def as_dict(self) -> dict[str, Any]: ...

    def updated(self, values: dict[str, Any]) -> ProtocolConfig: ...

    @property
    def recovery_bound_s(self) -> float: ...


# (node name, settings, seeded random.Random, incarnation) -> the protocol's layers, bottom first.
class Rng(Protocol):
    """A seeded random.Random as stacks use it, named without importing random (no I/O in node/)."""

    def __init__(self, seed: int, /) -> None: ...

    def getrandbits(self, k: int, /) -> int: ...

    def random(self) -> float: ...


LayerFactory = Callable[[str, Any, Rng, int], list[Layer]]
# (seeded random.Random, the headers of this protocol the fuzzed node sent lately, newest last)
# -> one header a peer could send: valid on the wire, hostile in its values.
HeaderFuzzer = Callable[[Rng, Sequence[Any]], object]


def xmit_req_sent(ev: Mapping[str, Any]) -> bool:
    """The retransmission request every built-in protocol logs when it sends one (`xmit_req_tx`)."""
    return ev.get("kind") == "xmit_req_tx"


def retransmission_sent(ev: Mapping[str, Any]) -> bool:
    """Retransmission traffic as every built-in protocol logs it: a request sent (`xmit_req_tx`), or a
    message sent again for any cause (`retransmit`: asked for, timed out, unasked)."""
    return ev.get("kind") in ("xmit_req_tx", "retransmit")


@dataclass(frozen=True, kw_only=True)
class EventMark:
    """An event kind a report marks on a timeline, as the protocol that logs it describes it."""

    kind: str
    # The legend's words for it.
    label: str
    # A word written next to the mark (one per burst of marks of a kind); "" for none.
    text: str = ""


@dataclass(frozen=True, kw_only=True)
class ChaosSet:
    """A protocol's chaos set for the mutant hunt, as data (harness.mutants draws from it per seed).

    Every set has 3 nodes, streams for 10-20 s (unicast pairs both ways, or one multicast stream
    per node for a multicast protocol), loss, duplication, reordering, delay, partitions and typed
    drops (`ProtocolSpec.chaos_drop_types`); the fields say what else fits the protocol."""

    # A setting each seed draws one of `modes` for (UNICAST3's resync); mutation_settings may force it.
    mode_key: str | None = None
    modes: tuple[str, ...] = ()
    # Settings every seed takes as they are, then settings drawn per seed (key -> choices).
    settings: Mapping[str, Any] = field(default_factory=dict)
    draws: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    # Settings whose sum is how long a connection outlives silence: raised so that it outlasts every
    # disturbance plus `lifetime_slack_s` (a peer cut off longer is gone for good, to the protocol).
    lifetime_keys: tuple[str, ...] = ()
    lifetime_slack_s: float = 8.0
    # Injected-view episodes: the SYNC design's asymmetric split and JGRP-1875's stale ACK (its type).
    view_episodes: bool = False
    stale_ack_type: str = "ACK"
    # The mode in which admin SYNC steps are drawn (None: never).
    admin_sync_mode: str | None = None
    # Restarts and kills of nodes.
    restarts: bool = True
    # The UNICAST3 design's first message lost: on every seed the first 1-3 messages of one stream are dropped
    # at its receiver (a typed drop of this type when the stream starts); None: never.
    first_loss_type: str | None = None
    # The share of seeds that run on a lossless network (constant delay, no other fault) with the
    # check xmit_traffic at xmit_bound 0: no retransmission request is ever needed there.
    lossless_share: float = 0.0
    # The share of the other seeds that run with this membership protocol (`membership:`): every
    # node multicasts while one member is killed and restarted (it rejoins with a join digest);
    # judged with views_agree too.
    membership: str | None = None
    membership_share: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ProtocolSpec:
    name: str
    summary: str
    # Settings: a scenario's `config:` mapping -> a validated settings object. Raises
    # node.errors.SettingError whose `key` names the bad setting ("xmit_interval").
    config: Callable[[Mapping[str, Any]], ProtocolConfig]
    layers: LayerFactory
    header: HeaderCodec | None = None
    message_types: tuple[str, ...] = ()
    event_kinds: Mapping[str, str] = field(default_factory=dict)
    # Which of those are written once per message (the rest are rare: reports show each one).
    per_message_kinds: tuple[str, ...] = ()
    # Its own control traffic for overhead metrics: metric name -> the kind logged when sent.
    overhead_kinds: Mapping[str, str] = field(default_factory=dict)
    multicast: bool = False
    default_checks: tuple[str, ...] = UNICAST_CHECKS
    # Planted bugs, selected by the `mutation:` setting (harness.mutants): name -> what it breaks.
    mutations: Mapping[str, str] = field(default_factory=dict)
    # Settings a mutant needs to show (e.g. the resync mode whose path holds the bug).
    mutation_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Message types a generated chaos schedule drops, repeated for weight (harness.mutants).
    chaos_drop_types: tuple[str, ...] = ()
    # The setting that names the variant of the protocol, for pass rates per variant (pipeline).
    variant_key: str | None = None
    # The values of variant_key worth comparing (`splitbrain compare` runs each); () = the default.
    variants: tuple[str, ...] = ()
    # Random headers for the protocol-level fuzzer (tests/protocol_fuzz.py); None: not fuzzed.
    fuzz: HeaderFuzzer | None = None
    # A membership protocol (GMS): chosen by a scenario's `membership:`, not by `protocol:`, and
    # stacked around the reliable protocol: `below` gives the layers that sit under it (unreliable
    # discovery, heartbeats, merge info), `layers` those above it.
    membership: bool = False
    below: LayerFactory | None = None
    # Codecs of further header ids the protocol's layers use (registered with `header`).
    extra_headers: tuple[HeaderCodec, ...] = ()

    # Is this event (as logged by the protocol) a message sent to get a receiver back in step with
    # a sender: a resync control message, or data resent because a resync asked for it? The
    # check `resync_traffic` counts them (JGRP-1874); None: the protocol has no resync.
    resync_traffic: Callable[[Mapping[str, Any]], bool] | None = None
    # Is this event retransmission traffic: a request sent (an XMIT-REQ or NAK) or a message sent
    # again, whatever the cause? The check `xmit_traffic` counts them (the MCAST design's spurious
    # retransmission) and names each kind; None: the protocol never retransmits.
    xmit_traffic: Callable[[Mapping[str, Any]], bool] | None = None
    # How long after its last send a sender's window may take to see everything acknowledged, and
    # the setting that makes it so: (validated settings) -> (setting, seconds), e.g. NAKACK2's STABLE
    # rounds. windows_synced calls a pair that had less time inconclusive, not out of sync; None:
    # acks follow deliveries within the recovery bound.
    ack_bound: Callable[[Any], tuple[str, float]] | None = None
    # How the mutant hunt (harness.mutants) builds this protocol's chaos schedules; None: no hunt.
    chaos: ChaosSet | None = None
    # Planted bugs that are old code this project fixed (the bug museum selects them with
    # `mutation:`); not in the mutant hunt.
    regressions: Mapping[str, str] = field(default_factory=dict)
    # Settings that are unsafe on a transport, or with in-process drops below the protocol:
    # (validated settings, transport "udp" | "tcp", drops below?) -> [(key, why)], empty if safe.
    # Scenarios and the node refuse what it names (exit 2), each problem at its key.
    unsafe: Callable[[Any, str, bool], list[tuple[str, str]]] | None = None
    # Do these (validated) settings rely on every layer below never dropping a message (nothing
    # would resend it)? The node's TCP transport then buffers instead of dropping; None: never.
    lossless_below: Callable[[Any], bool] | None = None
    # A real implementation outside this package, in a process of its own (JGroups itself): it
    # has no layers here, the simulator refuses it, its scenarios state their recovery_bound, and
    # it is listed apart from the protocols a scenario may simulate (external_names()).
    external: bool = False
    # Does its node report per-peer windows (`window`, `conn_state`)? Without them windows_synced
    # is not applicable to its runs.
    reports_windows: bool = True
    # The reasons of a receive window's move to CLOSED (`conn_state`) that discard the window for
    # real, so that what comes next from that sender starts afresh (a CLOSE received, a window
    # reaped after leaving the view or idling). The checks fifo and no_duplicates let a sequence
    # start again, or a message come again, only after such a discard; a window the protocol
    # replaced by itself (a resync) is not one.
    discard_reasons: frozenset[str] = frozenset()

    # What reports mark, in words of no protocol (pipeline/report and pipeline/metrics read these):
    # messages sent to get a receiver back in step with a sender, drawn on the link's panel;
    resync_marks: tuple[EventMark, ...] = ()
    # membership events (suspicions, merges, leaves) drawn on each node's view band;
    membership_marks: tuple[EventMark, ...] = ()
    # the kinds logged when a sender blocks on a full send window and when it goes on: (block,
    # unblock), for the time blocked per sender; None: its senders never block;
    block_kinds: tuple[str, str] | None = None
    # kinds whose `low` and `high` give a sender's send window over time (its fill, high - low).
    send_window_kinds: tuple[str, ...] = ()

    def unsafe_settings(self, settings: Mapping[str, Any], transport: str, drops_below: bool) -> list[tuple[str, str]]:
        """What `unsafe` says of these settings (validated here; a bad one raises SettingError)."""
        if self.unsafe is None:
            return []
        return self.unsafe(self.config(settings), transport, drops_below)

    def needs_lossless_below(self, settings: Mapping[str, Any]) -> bool:
        """What `lossless_below` says of these settings (validated here)."""
        return self.lossless_below is not None and self.lossless_below(self.config(settings))

    def variant(self, settings: Mapping[str, Any]) -> str | None:
        if self.variant_key is None:
            return None
        value = settings.get(self.variant_key)
        if value is None:
            value = self.config({}).as_dict().get(self.variant_key)
        return None if value is None else str(value)


# Modules with a module-level `SPEC: ProtocolSpec`, one line per protocol; the package is named
# after the protocol (node.<name>.spec), which is how get(name) finds it without the others.
BUILTIN = (
    "splitbrain.node.unicast3.spec",
    "splitbrain.node.unicast2.spec",
    "splitbrain.node.unicast.spec",
    "splitbrain.node.nakack2.spec",
    "splitbrain.node.mcast.spec",
    "splitbrain.node.gms.spec",
    "splitbrain.node.jgroups.spec",
)
ENV_PROTOCOLS = "SPLITBRAIN_PROTOCOLS"
DEFAULT_PROTOCOL = "unicast3"

_SPECS: dict[str, ProtocolSpec] = {}
_loaded = False  # every spec, built-in and SPLITBRAIN_PROTOCOLS, is registered
_BUILTIN_BY_NAME = {module.split(".")[-2]: module for module in BUILTIN}
_kinds: dict[str, str] | None = None


def register(spec: ProtocolSpec) -> ProtocolSpec:
    existing = _SPECS.get(spec.name)
    if existing is not None and existing is not spec:
        raise ValueError(f"protocol {spec.name!r} is already registered")
    clash = set(spec.event_kinds) & set(CORE_EVENT_KINDS)
    if clash:
        raise ValueError(f"protocol {spec.name!r} redefines core event kind(s) {', '.join(sorted(clash))}")
    if spec.header is not None:
        register_header(spec.header)
    for codec in spec.extra_headers:
        register_header(codec)
    _SPECS[spec.name] = spec
    _forget_kinds()
    return spec


def _forget_kinds() -> None:
    global _kinds
    _kinds = None


def _extra_modules() -> list[str]:
    return [m.strip() for m in os.environ.get(ENV_PROTOCOLS, "").split(",") if m.strip()]


def _load(module: str) -> None:
    try:
        spec = import_module(module).SPEC
    except (ImportError, AttributeError) as exc:
        raise RegistryError(f"{ENV_PROTOCOLS}: cannot load a protocol spec from {module!r}: {exc}") from None
    register(spec)


def check_extras() -> None:
    """Load the spec modules SPLITBRAIN_PROTOCOLS names (RegistryError if one cannot be), and no
    built-in one: what a command checks before it runs."""
    for module in _extra_modules():
        _load(module)


def _specs() -> dict[str, ProtocolSpec]:
    global _loaded
    if not _loaded:
        for module in (*BUILTIN, *_extra_modules()):
            _load(module)
        _loaded = True
        # The built-in protocols first, in BUILTIN's order, whichever get() loaded first.
        builtin = {name: _SPECS[name] for name in _BUILTIN_BY_NAME if name in _SPECS}
        rest = {name: spec for name, spec in _SPECS.items() if name not in builtin}
        _SPECS.clear()
        _SPECS.update(builtin)
        _SPECS.update(rest)
    return _SPECS


def unregister(name: str) -> None:
    """Remove a protocol (tests that register a toy protocol clean up with this)."""
    _SPECS.pop(name, None)
    _forget_kinds()


def names() -> tuple[str, ...]:
    """The reliable-delivery protocols of this package, which every backend runs (the simulator
    too); a scenario's `protocol:` may also name one of external_names()."""
    return tuple(name for name, spec in _specs().items() if not spec.membership and not spec.external)


def external_names() -> tuple[str, ...]:
    """Real implementations outside this package a scenario's `protocol:` may name (live backends only)."""
    return tuple(name for name, spec in _specs().items() if spec.external)


def is_protocol(name: object) -> bool:
    """Is this a reliable-delivery protocol a scenario's `protocol:` may name (as in names())?"""
    try:
        return not get(name).membership  # type: ignore[arg-type]  # get() refuses a non-string
    except ValueError:
        return False


def membership_names() -> tuple[str, ...]:
    """The membership protocols a scenario's `membership:` may name, besides "static"."""
    return tuple(name for name, spec in _specs().items() if spec.membership)


def get(name: str) -> ProtocolSpec:
    """The spec of an implemented protocol; ValueError (naming the available ones) otherwise."""
    key = name if isinstance(name, str) else ""
    spec = _SPECS.get(key)
    if spec is None and not _loaded and key in _BUILTIN_BY_NAME:
        _load(_BUILTIN_BY_NAME[key])
        spec = _SPECS.get(key)
    if spec is not None:
        return spec
    specs = _specs()
    spec = specs.get(key)
    if spec is None:
        raise ValueError(f"protocol: {name!r} is not implemented (available: {', '.join(specs)})")
    return spec


def event_kinds() -> dict[str, str]:
    """Every event kind any driver or registered protocol may write: kind -> what it records.
    (Cached: validate_event asks once per event.)"""
    global _kinds
    if _kinds is None:
        kinds = dict(CORE_EVENT_KINDS)
        for spec in _specs().values():
            kinds.update(spec.event_kinds)
        _kinds = kinds
    return _kinds


def rare_event_kinds() -> tuple[str, ...]:
    """Every kind that is not written once per message (node.events.PER_MESSAGE_KINDS and the
    protocols' per_message_kinds): what a report may show event by event."""
    frequent = set(PER_MESSAGE_KINDS)
    for spec in _specs().values():
        frequent.update(spec.per_message_kinds)
    return tuple(kind for kind in event_kinds() if kind not in frequent)


def overhead_kinds() -> dict[str, str]:
    """Control traffic for overhead metrics, the shared kinds first: metric name -> event kind."""
    kinds = dict(OVERHEAD_KINDS)
    for spec in _specs().values():
        kinds.update(spec.overhead_kinds)
    return kinds


def _marks(attr: str) -> tuple[EventMark, ...]:
    """Every registered spec's marks of one sort, the first of each kind, in registry order."""
    marks: dict[str, EventMark] = {}
    for spec in _specs().values():
        for mark in getattr(spec, attr):
            marks.setdefault(mark.kind, mark)
    return tuple(marks.values())


def resync_marks() -> tuple[EventMark, ...]:
    """The resync messages of every protocol, as reports mark them on a link."""
    return _marks("resync_marks")


def membership_marks() -> tuple[EventMark, ...]:
    """The membership events of every protocol, as reports mark them on a node's view band."""
    return _marks("membership_marks")


def block_kinds() -> tuple[frozenset[str], frozenset[str]]:
    """(kinds that block a sender, kinds that unblock it) over every protocol."""
    pairs = [spec.block_kinds for spec in _specs().values() if spec.block_kinds is not None]
    return frozenset(b for b, _ in pairs), frozenset(u for _, u in pairs)


def send_window_kinds() -> tuple[str, ...]:
    """The kinds whose low and high give a sender's send window over time, over every protocol."""
    return tuple(dict.fromkeys(kind for spec in _specs().values() for kind in spec.send_window_kinds))


def message_types(name: str | None = None) -> frozenset[str]:
    """Message types of one protocol (or of all), plus "APP" for a message without a header."""
    specs = _specs().values() if name is None else [get(name)]
    return frozenset(t for spec in specs for t in spec.message_types) | {"APP"}
