"""The node daemon's configuration: one YAML or TOML file, overridable by environment variables.

Every key is checked on start and an error names the key it is about ("peers.B", "config.xmit_interval"),
so that `python -m splitbrain.node` can stop with exit code 2 and a message a person can act on. Protocol
settings (`config:`) are validated by the protocol itself (its spec in node/protocols.py); this module
only prefixes its key with "config.".

Environment: SPLITBRAIN_<KEY> overrides a top-level key (SPLITBRAIN_BIND=127.0.0.2:7800) and
SPLITBRAIN_CONFIG_<SETTING> one protocol setting (SPLITBRAIN_CONFIG_XMIT_INTERVAL=0.2). String keys
take the value as it is; other keys parse it as a YAML scalar or flow collection
(SPLITBRAIN_PEERS='{B: "127.0.0.3:7800"}'; peers also accept "B=127.0.0.3:7800,C=127.0.0.4:7800").

The admin API changes views, faults and streams, so a node whose admin address is not a loopback
address needs `admin_token`; `admin_open: true` says on purpose that anyone who reaches it may.
"""

from __future__ import annotations

import ipaddress
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .. import protocols, settings
from ..compose import split_config
from ..errors import SettingError
from ..wire import MAX_FRAME_BYTES, MAX_NAME_BYTES

ENV_PREFIX = "SPLITBRAIN_"
TRANSPORTS = ("udp", "tcp")
# The header of the admin token on every POST and DELETE (node/runtime/admin.py; its clients).
TOKEN_HEADER = "X-Splitbrain-Token"
# The smallest bundle that still holds one ordinary message with its frame header.
MIN_BUNDLE_BYTES = 512
# TCP frames may be larger than a datagram, but a frame counts its messages in a u16: 1 MB of the
# smallest UNICAST3 message (22 bytes) stays below 65 535 messages.
MAX_TCP_BUNDLE_BYTES = 1_000_000
# An epoch this far in the future would give every event a negative time: surely a mistake.
MAX_EPOCH_AHEAD_S = 3600.0


class ConfigError(SettingError):
    """A configuration problem; `key` names the offending key (dotted for nested keys)."""


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(key: str, value: object, allow_port_zero: bool = True) -> Address:
    """ "host:port" (IPv6 as "[::1]:port") -> Address; errors name `key`."""
    if not isinstance(value, str):
        raise ConfigError(key, f'expected "host:port", got {value!r}')
    text = value.strip()
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
    else:
        host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text:
        raise ConfigError(key, f'expected "host:port", got {value!r}')
    if ":" in host and not text.startswith("["):
        raise ConfigError(key, f'write an IPv6 address as "[addr]:port", got {value!r}')
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(key, f"port is not a number in {value!r}") from None
    lowest = 0 if allow_port_zero else 1
    if not lowest <= port <= 65535:
        raise ConfigError(key, f"port must be between {lowest} and 65535, got {port}")
    if any(c.isspace() for c in host):
        raise ConfigError(key, f"bad host in {value!r}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        # A host name: resolved when the node starts (and an error then names the key too).
        if not all(part and len(part) <= 63 for part in host.split(".")) or len(host) > 253:
            raise ConfigError(key, f"bad host in {value!r}") from None
    return Address(host, port)


@dataclass(frozen=True)
class NodeConfig:
    name: str
    bind: Address
    admin: Address
    transport: str = "udp"
    protocol: str = protocols.DEFAULT_PROTOCOL
    # "static" (views only from the admin API's POST /view) or a membership protocol ("gms"),
    # which finds its group among `peers` and installs views itself.
    membership: str = "static"
    peers: dict[str, Address] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    events: str | None = None
    event_log: bool = True
    incarnation: int = 0
    seed: int = 0
    epoch: float | None = None
    admin_token: str | None = None
    admin_open: bool = False
    bundling: bool = True
    bundle_max_bytes: int = 60_000
    # UDP only: multicasts go to this IP multicast group ("239.x.y.z:port"), one datagram for
    # every member instead of one per member (node/runtime/ipmcast.py). None: N unicasts.
    mcast_group: Address | None = None

    @classmethod
    def from_dict(cls, raw: object, env: dict[str, str] | None = None) -> NodeConfig:
        """Validate a mapping (plus SPLITBRAIN_* overrides from `env`); raise ConfigError."""
        if not isinstance(raw, dict):
            raise ConfigError("config file", f"expected a mapping at the top level, got {type(raw).__name__}")
        values = dict(raw)
        if env:
            _apply_env(values, env)
        return _validate(values)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able, as resolved (the admin token is masked)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Address):
                value = str(value)
            elif f.name == "peers":
                value = {k: str(v) for k, v in value.items()}
            elif f.name == "admin_token" and value is not None:
                value = "***"
            out[f.name] = value
        return out


_KEYS = {f.name for f in fields(NodeConfig)}
_STRING_KEYS = {"name", "bind", "admin", "transport", "protocol", "membership", "events", "admin_token", "mcast_group"}


def load_config(path: str | os.PathLike[str] | None, env: dict[str, str] | None = None) -> NodeConfig:
    """Read a .yaml/.yml/.toml file (or nothing, when path is None) and apply the environment."""
    env = dict(os.environ) if env is None else env
    raw: object = {}
    if path is not None:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("--config", f"cannot read {path}: {exc.strerror or exc}") from None
        suffix = path.suffix.lower()
        if suffix in (".yaml", ".yml"):
            import yaml

            try:
                raw = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ConfigError("--config", f"{path} is not valid YAML: {exc}") from None
            raw = {} if raw is None else raw
        elif suffix == ".toml":
            import tomllib

            try:
                raw = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError("--config", f"{path} is not valid TOML: {exc}") from None
        else:
            raise ConfigError("--config", f"{path}: expected a .yaml, .yml or .toml file")
    return NodeConfig.from_dict(raw, env)


# ---- environment ------------------------------------------------------------------------------


def env_overrides(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """SPLITBRAIN_* variables as {key: raw value}, and the variables that match no key."""
    found, unknown = {}, []
    for var, value in env.items():
        if not var.startswith(ENV_PREFIX) or var == protocols.ENV_PROTOCOLS:  # the registry's, not a key
            continue
        key = var[len(ENV_PREFIX) :].lower()
        if key in _KEYS or (key.startswith("config_") and len(key) > len("config_")):
            found[key] = value
        else:
            unknown.append(var)
    return found, unknown


def _apply_env(values: dict[str, Any], env: dict[str, str]) -> None:
    found, _unknown = env_overrides(env)
    # Whole-key overrides first, then single protocol settings on top of them.
    for key, text in sorted(found.items()):
        if key.startswith("config_"):
            continue
        if key in _STRING_KEYS:
            values[key] = text
        elif key == "peers" and "=" in text and not text.lstrip().startswith("{"):
            values[key] = _parse_peer_list(text)
        else:
            values[key] = _yaml_value(f"{ENV_PREFIX}{key.upper()}", text)
    for key, text in sorted(found.items()):
        if not key.startswith("config_"):
            continue
        setting = key[len("config_") :]
        protocol = values.get("config")
        if protocol is None:
            protocol = {}
        if not isinstance(protocol, dict):
            raise ConfigError("config", f"expected a mapping of protocol settings, got {protocol!r}")
        values["config"] = {**protocol, setting: _yaml_value(f"{ENV_PREFIX}{key.upper()}", text)}


def _yaml_value(var: str, text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(var, f"cannot parse {text!r}: {exc}") from None


def _parse_peer_list(text: str) -> dict[str, str]:
    peers = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, addr = item.partition("=")
        if not sep:
            raise ConfigError("peers", f"expected NAME=host:port, got {item!r}")
        peers[name.strip()] = addr.strip()
    return peers


# ---- validation -------------------------------------------------------------------------------


def _validate(values: dict[str, Any]) -> NodeConfig:
    for key in values:
        if key not in _KEYS:
            raise ConfigError(str(key), f"unknown key (known: {', '.join(sorted(_KEYS))})")
    for key in ("name", "bind", "admin"):
        if values.get(key) is None:
            raise ConfigError(key, "required")
    name = _name("name", values["name"])
    bind = parse_address("bind", values["bind"])
    admin = parse_address("admin", values["admin"])
    transport = _choice("transport", values.get("transport", "udp"), TRANSPORTS)
    protocol = _choice("protocol", values.get("protocol", protocols.DEFAULT_PROTOCOL), protocols.names())
    membership = _choice("membership", values.get("membership", "static"), ("static", *protocols.membership_names()))

    peers_raw = values.get("peers") or {}
    if not isinstance(peers_raw, dict):
        raise ConfigError("peers", f'expected a mapping name -> "host:port", got {peers_raw!r}')
    peers = {}
    for peer, addr in peers_raw.items():
        peer_name = _name(f"peers.{peer}", peer)
        if peer_name == name:
            raise ConfigError(f"peers.{peer}", "a node cannot be its own peer")
        peers[peer_name] = parse_address(f"peers.{peer}", addr, allow_port_zero=False)

    protocol_settings = values.get("config") or {}
    if not isinstance(protocol_settings, dict):
        raise ConfigError("config", f"expected a mapping of protocol settings, got {protocol_settings!r}")
    try:
        split = split_config(protocol, protocol_settings, membership)
        for owner, settings in split.items():
            protocols.get(owner).config(settings)
        # Settings the protocol calls unsafe on this transport (NAKACK2 without retransmission
        # over UDP) are refused; in-process drops are refused when they are added (admin API).
        unsafe = protocols.get(protocol).unsafe_settings(split[protocol], transport, False)
    except SettingError as exc:
        # The protocol names its key; prefix it with where it lives.
        raise ConfigError(f"config.{exc.key}", exc.message) from None
    except ValueError as exc:
        raise ConfigError("config", str(exc)) from None
    if unsafe:
        raise ConfigError(f"config.{unsafe[0][0]}", "; ".join(why for _, why in unsafe))

    event_log = _bool("event_log", values.get("event_log", True))
    events = values.get("events")
    if events is not None and (not isinstance(events, str) or not events.strip()):
        raise ConfigError("events", f"expected a file path, got {events!r}")
    if event_log and events is None:
        raise ConfigError("events", "required unless event_log: false")
    if events is not None and Path(events).is_dir():
        raise ConfigError("events", f"{events} is a directory")

    incarnation = _int("incarnation", values.get("incarnation", 0), lowest=0)
    seed = _int("seed", values.get("seed", 0))
    epoch = values.get("epoch")
    if epoch is not None:
        epoch = _number("epoch", epoch)
        if epoch < 0:
            raise ConfigError("epoch", f"must be >= 0 (a time.time() value), got {epoch!r}")
        if epoch > time.time() + MAX_EPOCH_AHEAD_S:
            raise ConfigError("epoch", f"{epoch!r} is more than {MAX_EPOCH_AHEAD_S:g} s in the future")
    token = values.get("admin_token")
    if token is not None and (not isinstance(token, str) or not token):
        raise ConfigError("admin_token", "expected a non-empty string")
    admin_open = _bool("admin_open", values.get("admin_open", False))
    if token is None and not admin_open and not is_loopback(admin.host):
        raise ConfigError(
            "admin_token",
            f"required when the admin API listens on {admin.host}, which is not a "
            "loopback address: without it anyone who reaches the address may change views, faults "
            "and streams (set admin_open: true to allow that on purpose)",
        )
    bundling = _bool("bundling", values.get("bundling", True))
    limit = MAX_FRAME_BYTES if transport == "udp" else MAX_TCP_BUNDLE_BYTES
    bundle_max = _int("bundle_max_bytes", values.get("bundle_max_bytes", 60_000), lowest=MIN_BUNDLE_BYTES)
    if bundle_max > limit:
        raise ConfigError("bundle_max_bytes", f"must be <= {limit} over {transport}, got {bundle_max}")
    mcast_group = _mcast_group(values.get("mcast_group"), transport, protocol, bind)
    return NodeConfig(
        name=name,
        bind=bind,
        admin=admin,
        transport=transport,
        protocol=protocol,
        membership=membership,
        peers=peers,
        config=dict(protocol_settings),
        events=events,
        event_log=event_log,
        incarnation=incarnation,
        seed=seed,
        epoch=epoch,
        admin_token=token,
        admin_open=admin_open,
        bundling=bundling,
        bundle_max_bytes=bundle_max,
        mcast_group=mcast_group,
    )


def _mcast_group(value: object, transport: str, protocol: str, bind: Address) -> Address | None:
    """The IP multicast group: an IPv4 multicast address and a port, for UDP and a multicast
    protocol only (a unicast protocol would never use it, TCP cannot carry it)."""
    if value is None:
        return None
    group = parse_address("mcast_group", value, allow_port_zero=False)
    try:
        ip = ipaddress.ip_address(group.host)
    except ValueError:
        raise ConfigError(
            "mcast_group", f"expected an IPv4 multicast address, got the host name {group.host!r}"
        ) from None
    if ip.version != 4 or not ip.is_multicast:
        raise ConfigError("mcast_group", f"{group.host} is not an IPv4 multicast address (224.0.0.0/4)")
    if transport != "udp":
        raise ConfigError("mcast_group", f"IP multicast needs transport udp (this node uses {transport})")
    if not protocols.get(protocol).multicast:
        raise ConfigError("mcast_group", f"{protocol} sends no multicasts: use nakack2 or mcast, or drop the key")
    if ":" in bind.host:
        raise ConfigError("mcast_group", f"IP multicast is IPv4 only here, and bind is {bind}")
    return group


def is_loopback(host: str) -> bool:
    """Whether only this host reaches `host`: 127.0.0.0/8, ::1 (also IPv4-mapped) or "localhost".

    Any other host name counts as reachable from elsewhere, since it may resolve to anything.
    """
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _name(key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"expected a non-empty node name, got {value!r}")
    if ":" in value or any(c.isspace() for c in value):
        # App ids are "sender:stream:n", so a name may not contain ':'.
        raise ConfigError(key, f"a node name may not contain ':' or spaces, got {value!r}")
    if len(value.encode()) > MAX_NAME_BYTES:
        raise ConfigError(key, f"longer than {MAX_NAME_BYTES} bytes")
    return value


def _choice(key: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(key, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def _bool(key: str, value: object) -> bool:
    return settings.boolean(key, value, error=ConfigError)


def _int(key: str, value: object, lowest: int | None = None) -> int:
    return settings.integer(key, value, lowest, error=ConfigError)


def _number(key: str, value: object) -> float:
    return settings.number(key, value, finite=True, error=ConfigError)
