"""Proxies, their toxics, and the collection the REST API drives (Toxiproxy's proxy.go,
proxy_collection.go and toxic_collection.go).

A proxy listens on `listen`, and for each accepted client opens a connection to `upstream` and
runs a `Connection` (two links of toxic stages) between them. Its toxics live in two chains,
upstream (client -> server) and downstream (server -> client); every change to a chain is applied
to the links of connections already open, as Toxiproxy does.

Everything here runs on one asyncio loop. `Toxiproxy.lock` serialises the API's mutations (the Go
server's collection and proxy mutexes), so an update never interleaves with another one.

Errors the API reports are `ApiError`s with Toxiproxy's messages and status codes; errors Go's
net package would produce (a port in use) carry Go's wording and status 500, as in Toxiproxy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import ipaddress
import logging
import os
import random
import socket
import struct
from collections import defaultdict
from typing import Any

from splitbrain.node.errors import RunFailed

from .link import DOWNSTREAM, UPSTREAM, Connection
from .toxics import TOXIC_TYPES

log = logging.getLogger(__name__)

VERSION = "2.12.0"  # the Toxiproxy release whose API and toxics this server follows
UPSTREAM_DIAL_TIMEOUT_S = 10.0


class ApiError(RunFailed):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def new(self) -> ApiError:
        """A fresh copy of a template error (so raising it does not pin old tracebacks)."""
        return ApiError(self.message, self.status)

    def joined(self, detail: str) -> ApiError:
        """Toxiproxy's joinError: "<message>: <detail>" with the same status."""
        return ApiError(f"{self.message}: {detail}", self.status)


ERR_BAD_REQUEST_BODY = ApiError("bad request body", 400)
ERR_MISSING_FIELD = ApiError("missing required field", 400)
ERR_PROXY_NOT_FOUND = ApiError("proxy not found", 404)
ERR_PROXY_ALREADY_EXISTS = ApiError("proxy already exists", 409)
ERR_INVALID_STREAM = ApiError("stream was invalid, can be either upstream or downstream", 400)
ERR_INVALID_TOXIC_TYPE = ApiError("invalid toxic type", 400)
ERR_TOXIC_ALREADY_EXISTS = ApiError("toxic already exists", 409)
ERR_TOXIC_NOT_FOUND = ApiError("toxic not found", 404)


class ProxyAlreadyStarted(RunFailed):
    pass


# ---- addresses, the way Go's net package reads and prints them ---------------------------------


def split_host_port(addr: str) -> tuple[str, str]:
    """Go's net.SplitHostPort; raises ValueError with Go's wording."""
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0:
            raise ValueError(f"address {addr}: missing ']' in address")
        host, rest = addr[1:end], addr[end + 1 :]
        if not rest.startswith(":"):
            raise ValueError(f"address {addr}: missing port in address")
        return host, rest[1:]
    i = addr.rfind(":")
    if i < 0:
        raise ValueError(f"address {addr}: missing port in address")
    host, port = addr[:i], addr[i + 1 :]
    if ":" in host:
        raise ValueError(f"address {addr}: too many colons in address")
    return host, port


def parse_port(addr: str, port: str) -> int:
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {addr}: invalid port")
    return int(port)


def format_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _go_strerror(exc: OSError) -> str:
    text = os.strerror(exc.errno) if exc.errno else str(exc)
    return text[:1].lower() + text[1:]


def _is_unspecified(host: str) -> bool:
    if host == "":
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


async def bind_listener(listen: str) -> socket.socket:
    """A listening socket for `listen`, as Go's net.Listen("tcp", listen) makes it.

    An empty or unspecified host listens on every address with one dual-stack IPv6 socket
    (reported as "[::]:port"); a host name listens on one of its addresses, IPv4 first.
    """
    try:
        # Go reads an empty address as "every address, any port".
        host, port_text = split_host_port(listen) if listen else ("", "0")
        port = parse_port(listen, port_text)
    except ValueError as exc:
        raise ApiError(f"listen tcp: {exc}", 500) from None
    candidates: list[tuple[int, tuple]] = []
    if _is_unspecified(host):
        if socket.has_ipv6:
            candidates.append((socket.AF_INET6, ("::", port)))
        candidates.append((socket.AF_INET, ("0.0.0.0", port)))
    else:
        try:
            ip = ipaddress.ip_address(host.split("%")[0])
            candidates.append((socket.AF_INET6 if ip.version == 6 else socket.AF_INET, (host, port)))
        except ValueError:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror:
                raise ApiError(f"listen tcp: lookup {host}: no such host", 500) from None
            infos.sort(key=lambda info: info[0] != socket.AF_INET)
            candidates.extend((info[0], info[4][:2]) for info in infos[:1])
    last_error: OSError | None = None
    for family, sockaddr in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and _is_unspecified(sockaddr[0]):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(sockaddr)
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
            return sock
        except OSError as exc:
            sock.close()
            last_error = exc
            if exc.errno == errno.EAFNOSUPPORT:
                continue
            break
    assert last_error is not None
    raise ApiError(f"listen tcp {format_addr(host, port)}: bind: {_go_strerror(last_error)}", 500)


# ---- toxics and proxies -----------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class ToxicSpec:
    name: str
    type: str
    stream: str  # as the client spelled it; `direction` is the parsed value
    toxicity: float
    attributes: dict[str, int]
    direction: str

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": float32_shortest(self.toxicity),
        }


def float32_shortest(value: float) -> float:
    """The value Go prints for a float32: rounded to single precision, shortest digits."""
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return value
    for digits in range(1, 10):
        candidate = float(f"{single:.{digits}g}")
        if struct.unpack("f", struct.pack("f", candidate))[0] == single:
            return candidate
    return single


def parse_direction(stream: str) -> str:
    lowered = stream.lower()
    if lowered == UPSTREAM:
        return UPSTREAM
    if lowered == DOWNSTREAM:
        return DOWNSTREAM
    raise ERR_INVALID_STREAM.new()


class Proxy:
    def __init__(self, owner: Toxiproxy, name: str, listen: str, upstream: str) -> None:
        self.owner = owner
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, list[ToxicSpec]] = {UPSTREAM: [], DOWNSTREAM: []}
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._generation = 0  # bumped by every stop, so a connection still dialling knows

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": self.toxic_list(),
        }

    def toxic_list(self) -> list[dict[str, Any]]:
        return [t.to_json() for direction in (UPSTREAM, DOWNSTREAM) for t in self.toxics[direction]]

    # ---- listening ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self.enabled:
            raise ProxyAlreadyStarted(self.name)
        sock = await bind_listener(self.listen)
        sockname = sock.getsockname()
        self._server = await asyncio.start_server(self._accept, sock=sock, limit=2**16)
        self.listen = format_addr(sockname[0], sockname[1])
        self.enabled = True
        log.info("started proxy %s listen=%s upstream=%s", self.name, self.listen, self.upstream)

    async def stop(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        self._generation += 1
        server, self._server = self._server, None
        if server is not None:
            server.close()  # the listening socket is closed now; the port can be bound again
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()
        log.info("terminated proxy %s listen=%s", self.name, self.listen)

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        if listen != self.listen or upstream != self.upstream:
            await self.stop()
            self.listen, self.upstream = listen, upstream
        if enabled != self.enabled:
            if enabled:
                await self.start()
            else:
                await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        generation = self._generation
        try:
            host, port_text = split_host_port(self.upstream)
            port = parse_port(self.upstream, port_text)
            upstream = await asyncio.wait_for(asyncio.open_connection(host, port, limit=2**16), UPSTREAM_DIAL_TIMEOUT_S)
        except (TimeoutError, OSError, ValueError) as exc:
            log.warning("proxy %s: unable to open connection to upstream %s: %s", self.name, self.upstream, exc)
            writer.transport.abort()
            return
        if generation != self._generation or not self.enabled:
            writer.transport.abort()
            upstream[1].transport.abort()
            return
        conn = Connection(self, (reader, writer), upstream, random.Random(self.owner.rng.getrandbits(64)))
        self.connections.add(conn)
        conn.start(self.toxics)

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)

    # ---- metrics ------------------------------------------------------------------------------

    def metrics_key(self, direction: str) -> tuple[str, str, str, str]:
        return (direction, self.name, self.listen, self.upstream)

    def count_bytes(self, kind: str, key: tuple[str, str, str, str], n: int) -> None:
        self.owner.metrics[kind][key] += n

    # ---- toxics -------------------------------------------------------------------------------

    def find_toxic(self, name: str) -> ToxicSpec | None:
        return next((t for d in (UPSTREAM, DOWNSTREAM) for t in self.toxics[d] if t.name == name), None)

    def add_toxic(self, spec: ToxicSpec) -> None:
        self.toxics[spec.direction].append(spec)
        for conn in list(self.connections):
            conn.links[spec.direction].add_toxic(spec)

    async def update_toxic(self, spec: ToxicSpec) -> None:
        await asyncio.gather(*(conn.links[spec.direction].update_toxic(spec) for conn in list(self.connections)))

    async def remove_toxic(self, spec: ToxicSpec) -> None:
        self.toxics[spec.direction].remove(spec)
        detached = []
        for conn in list(self.connections):
            link = conn.links[spec.direction]
            stages = link.detach_toxic(spec)
            if stages is not None:
                detached.append((link, stages))
        await asyncio.gather(*(link.finish_removal(*stages) for link, stages in detached))

    async def reset_toxics(self) -> None:
        for direction in (UPSTREAM, DOWNSTREAM):
            while self.toxics[direction]:
                await self.remove_toxic(self.toxics[direction][0])


class Toxiproxy:
    """The server's state: proxies by name, the random source, and byte counters."""

    def __init__(self, seed: int | None = None, version: str = VERSION) -> None:
        self.version = version
        self.rng = random.Random(seed)
        self.proxies: dict[str, Proxy] = {}
        self.lock = asyncio.Lock()
        self.metrics: dict[str, dict[tuple, int]] = {"received": defaultdict(int), "sent": defaultdict(int)}

    def get(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ERR_PROXY_NOT_FOUND.new()
        return proxy

    async def create(self, name: str, listen: str, upstream: str, enabled: bool) -> Proxy:
        if name in self.proxies:
            raise ERR_PROXY_ALREADY_EXISTS.new()
        proxy = Proxy(self, name, listen, upstream)
        if enabled:
            await proxy.start()
        self.proxies[name] = proxy
        return proxy

    async def add_or_replace(self, name: str, listen: str, upstream: str, enabled: bool) -> Proxy:
        existing = self.proxies.get(name)
        if existing is not None:
            if existing.listen == listen and existing.upstream == upstream:
                return existing
            await existing.stop()
        proxy = Proxy(self, name, listen, upstream)
        if enabled:
            await proxy.start()
        self.proxies[name] = proxy
        return proxy

    async def delete(self, name: str) -> None:
        proxy = self.get(name)
        await proxy.stop()
        del self.proxies[name]

    async def reset(self) -> None:
        for proxy in list(self.proxies.values()):
            try:
                await proxy.start()
            except ProxyAlreadyStarted:
                pass
            await proxy.reset_toxics()

    async def shutdown(self) -> None:
        for proxy in list(self.proxies.values()):
            await proxy.stop()
        self.proxies.clear()

    def metrics_text(self) -> str:
        lines = []
        for kind in ("received", "sent"):
            metric = f"toxiproxy_proxy_{kind}_bytes_total"
            lines.append(f"# HELP {metric} The total number of bytes {kind} on a proxy link in a direction.")
            lines.append(f"# TYPE {metric} counter")
            for (direction, proxy, listener, upstream), value in sorted(self.metrics[kind].items()):
                pairs = (("direction", direction), ("listener", listener), ("proxy", proxy), ("upstream", upstream))
                labels = ",".join(f'{k}="{_prom_escape(v)}"' for k, v in pairs)
                lines.append(f"{metric}{{{labels}}} {value}")
        return "\n".join(lines) + "\n"


def _prom_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def new_toxic_attributes(toxic_type: str) -> dict[str, int]:
    return TOXIC_TYPES[toxic_type].default_attributes()
