"""The admin HTTP API of a node (aiohttp, JSON): the contract the harness drives nodes with.

Read endpoints are open; every POST and DELETE needs the header X-Splitbrain-Token when the node
has an admin_token (401 otherwise). Errors are JSON: {"error": "...", "field": "<name>" | null};
a bad request never stops the node.

    GET    /health            {"status": "ok", "node", "incarnation", "uptime_s"}
    GET    /state             node, incarnation, protocol, transport, now, view, streams,
                              windows [{proto, peer, side, conn_id, low, high, state, pending, missing}],
                              busy [{proto, reason}], and each layer's own detail under its name
                              (e.g. "unicast3", "faults")
    POST   /send              {"to", "count" | "duration", "rate"=100, "size"=100, "stream"?, "first_n"=1} -> 202
    GET    /streams           {"streams": [{"stream", "to", "sent", "planned", "done", ...}]}
    GET    /delivered         {"delivered": {sender: {stream: {count, first, last, order_violations,
                              duplicates}}}, "total"}
    POST   /sync/{peer}       {"peer", "started": true}
    POST   /view              {"members", "view_id"?} -> {"view_id"}
    POST   /leave_on_stop     {"enabled": bool} -> {"leave_on_stop"}: whether a graceful stop sends
                              LEAVE (membership gms; the harness turns it off to end a whole run)
    GET    /faults            {"rules": {id: rule + matched/acted}}
    POST   /faults            FaultRule fields -> 201 {"id"}
    DELETE /faults/{id}       204 (404 for an unknown id)
    DELETE /faults            204
    POST   /config            {setting: value} -> {"config": all protocol settings} (GMS's keys too)
    GET    /metrics           Prometheus text format
    GET    /config            the node's resolved configuration (extra; the token is masked)
    GET    /samples           latency samples of streams and deliveries (extra; for benchmarks)
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import socket
from collections.abc import Container
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from .. import protocols
from ..errors import SettingError
from ..faultlayer import FaultRule
from .config import TOKEN_HEADER, Address, ConfigError
from .errors import RequestError

if TYPE_CHECKING:
    from .node import Node  # the node imports this module when it serves: no cycle at run time

log = logging.getLogger("node.admin")

_FAULT_FIELDS = {f.name for f in fields(FaultRule)}
_SEND_FIELDS = {"to", "count", "duration", "rate", "size", "stream", "first_n"}
_VIEW_FIELDS = {"members", "view_id"}
_LEAVE_FIELDS = {"enabled"}


def _error(status: int, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": message, "field": field}, status=status)


class AdminServer:
    def __init__(self, node: Node):
        self.node = node
        self.app = web.Application(middlewares=[self._middleware], client_max_size=1024 * 1024)
        r = self.app.router
        r.add_get("/health", self.health)
        r.add_get("/state", self.state)
        r.add_post("/send", self.send)
        r.add_get("/streams", self.streams)
        r.add_get("/delivered", self.delivered)
        r.add_post("/sync/{peer}", self.sync)
        r.add_post("/view", self.view)
        r.add_post("/leave_on_stop", self.set_leave_on_stop)
        r.add_get("/faults", self.get_faults)
        r.add_post("/faults", self.add_fault)
        r.add_delete("/faults", self.clear_faults)
        r.add_delete("/faults/{id}", self.remove_fault)
        r.add_get("/config", self.get_config)
        r.add_post("/config", self.set_config)
        r.add_get("/metrics", self.metrics)
        r.add_get("/samples", self.samples)
        self.runner: web.AppRunner | None = None
        self.address: Address | None = None

    async def start(self, addr: Address) -> Address:
        sock = socket.socket(socket.AF_INET6 if ":" in addr.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((addr.host, addr.port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ConfigError("admin", f"cannot bind {addr}: {exc.strerror or exc}") from None
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self.runner.setup()
        await web.SockSite(self.runner, sock).start()
        host, port = sock.getsockname()[:2]
        self.address = Address(host, port)
        return self.address

    async def stop(self) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            await runner.cleanup()

    # ---- plumbing -----------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in ("POST", "DELETE", "PUT", "PATCH"):
            token = self.node.config.admin_token
            if token is not None:
                given = request.headers.get(TOKEN_HEADER, "")
                if not hmac.compare_digest(given.encode(), token.encode()):
                    return _error(401, f"missing or wrong {TOKEN_HEADER} header")
        try:
            return await handler(request)
        except RequestError as exc:
            return _error(exc.status, str(exc), exc.field)
        except web.HTTPException as exc:
            if exc.status >= 400:
                return _error(exc.status, exc.reason)
            raise
        except ValueError as exc:
            # A local error raised by the stack for a request it cannot honour.
            return _error(400, str(exc))
        except Exception as exc:
            log.exception("admin %s %s failed", request.method, request.path)
            return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    @staticmethod
    async def _body(request: web.Request, allowed: set[str] | None) -> dict[str, Any]:
        raw = await request.read()
        if not raw.strip():
            body = {}
        else:
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise RequestError(f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise RequestError(f"request body must be a JSON object, got {type(body).__name__}")
        if allowed is not None:
            for key in body:
                if key not in allowed:
                    raise RequestError(f"{key}: unknown field (known: {', '.join(sorted(allowed))})", key)
        return body

    def _running(self) -> None:
        if not self.node.running:
            raise RequestError("the node is stopping", None, 503)

    # ---- read endpoints -----------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        node = self.node
        return web.json_response(
            {
                "status": "ok" if node.running else "stopping",
                "node": node.name,
                "incarnation": node.incarnation,
                "uptime_s": node.uptime(),
            }
        )

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response(self.node.state())

    async def streams(self, request: web.Request) -> web.Response:
        return web.json_response({"streams": [s.to_dict() for s in self.node.streams.values()]})

    async def delivered(self, request: web.Request) -> web.Response:
        return web.json_response(self.node.delivered.to_dict())

    async def get_faults(self, request: web.Request) -> web.Response:
        return web.json_response({"rules": {str(k): v for k, v in self.node.faults.rules().items()}})

    async def get_config(self, request: web.Request) -> web.Response:
        node = self.node
        return web.json_response(
            {
                "node": node.config.as_dict(),
                "protocol": node.settings.as_dict(),
                # The membership protocol's settings (GMS), or null with static membership.
                "membership": None if node.membership_settings is None else node.membership_settings.as_dict(),
                "bind": str(node.bind_address),
                "admin": str(node.admin_address),
                "epoch": node.epoch,
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        from .metrics import CONTENT_TYPE, render  # prometheus_client only once someone scrapes

        return web.Response(body=render(self.node.registry), headers={"Content-Type": CONTENT_TYPE})

    async def samples(self, request: web.Request) -> web.Response:
        return web.json_response(self.node.samples())

    # ---- mutating endpoints -------------------------------------------------------------------

    async def send(self, request: web.Request) -> web.Response:
        self._running()
        body = await self._body(request, _SEND_FIELDS)
        if "to" not in body:
            raise RequestError("required", "to")
        s = self.node.start_stream(
            body["to"],
            count=body.get("count"),
            duration=body.get("duration"),
            rate=body.get("rate", 100),
            size=body.get("size", 100),
            stream=body.get("stream"),
            first_n=body.get("first_n", 1),
        )
        return web.json_response({"stream": s.stream, "to": list(s.to)}, status=202)

    async def sync(self, request: web.Request) -> web.Response:
        self._running()
        await self._body(request, None)
        peer = request.match_info["peer"]
        self.node.sync(peer)
        return web.json_response({"peer": peer, "started": True})

    async def view(self, request: web.Request) -> web.Response:
        self._running()
        body = await self._body(request, _VIEW_FIELDS)
        members = body.get("members")
        if not isinstance(members, list) or not all(isinstance(m, str) and m for m in members):
            raise RequestError("expected a list of node names", "members")
        if len(set(members)) != len(members):
            raise RequestError("a member is named twice", "members")
        view_id = body.get("view_id")
        if view_id is not None and (isinstance(view_id, bool) or not isinstance(view_id, int) or view_id < 0):
            raise RequestError(f"expected an integer >= 0, got {view_id!r}", "view_id")
        return web.json_response({"view_id": self.node.install_view(members, view_id)})

    async def set_leave_on_stop(self, request: web.Request) -> web.Response:
        self._running()
        body = await self._body(request, _LEAVE_FIELDS)
        enabled = body.get("enabled")
        if not isinstance(enabled, bool):
            raise RequestError(f"expected true or false, got {enabled!r}", "enabled")
        self.node.leave_on_stop = enabled
        return web.json_response({"leave_on_stop": enabled})

    async def add_fault(self, request: web.Request) -> web.Response:
        self._running()
        body = await self._body(request, _FAULT_FIELDS)
        rule = parse_fault_rule(body, self.node.peers)
        rule_id = self.node.add_fault(rule)
        return web.json_response({"id": rule_id}, status=201)

    async def remove_fault(self, request: web.Request) -> web.Response:
        self._running()
        try:
            rule_id = int(request.match_info["id"])
            self.node.remove_fault(rule_id)
        except (ValueError, KeyError):
            return _error(404, f"no fault rule {request.match_info['id']!r}", "id")
        return web.Response(status=204)

    async def clear_faults(self, request: web.Request) -> web.Response:
        self._running()
        self.node.clear_faults()
        return web.Response(status=204)

    async def set_config(self, request: web.Request) -> web.Response:
        self._running()
        body = await self._body(request, None)
        if not body:
            raise RequestError("no settings given")
        return web.json_response({"config": self.node.set_config(body)})


def parse_fault_rule(body: dict[str, Any], peers: Container[str]) -> FaultRule:
    """A FaultRule from its JSON form; RequestError names the bad field."""
    kw = {}
    for key, value in body.items():
        if key not in _FAULT_FIELDS:
            raise RequestError(f"{key}: unknown field (known: {', '.join(sorted(_FAULT_FIELDS))})", key)
        if key in ("direction", "action"):
            if not isinstance(value, str):
                raise RequestError(f"{key}: expected a string, got {value!r}", key)
        elif key == "peer":
            if value is not None and (not isinstance(value, str) or value not in peers):
                raise RequestError(f"peer: unknown peer {value!r}", key)
        elif key == "types":
            if value is not None:
                if isinstance(value, str):
                    value = [value]
                if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
                    raise RequestError("types: expected a list of message types", key)
                known = protocols.message_types()
                bad = [t for t in value if t not in known]
                if bad:
                    raise RequestError(
                        f"types: unknown message type(s) {', '.join(bad)} (known: {', '.join(sorted(known))})", key
                    )
                value = frozenset(value)
        elif key in ("count", "after"):
            if value is None and key == "count":
                pass
            elif isinstance(value, bool) or not isinstance(value, int):
                raise RequestError(f"{key}: expected an integer, got {value!r}", key)
        elif key == "seqnos":
            if value is not None:
                if (
                    not isinstance(value, list)
                    or len(value) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
                ):
                    raise RequestError(f"seqnos: expected [lo, hi], got {value!r}", key)
                value = (value[0], value[1])
        else:  # p, start, until, delay_s, jitter_s: numbers (start/until may be null)
            if value is None and key in ("start", "until"):
                pass
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise RequestError(f"{key}: expected a number, got {value!r}", key)
            else:
                value = float(value)
        kw[key] = value
    try:
        return FaultRule(**kw)
    except SettingError as exc:
        raise RequestError(str(exc), exc.key) from None
