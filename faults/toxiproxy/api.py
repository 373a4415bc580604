"""Toxiproxy's REST API on aiohttp, answering as the Go server does (api.go).

Status codes: create proxy 201, populate 201, delete and reset 204, everything else 200
(creating a toxic included). Errors are `{"error": ..., "status": ...}` written by Go's
http.Error, so with a text/plain content type and a trailing newline; populate instead merges
its error into its JSON answer. Unknown paths get Go's "404 page not found", a known path with
the wrong method a bare 405, and a browser user agent a 403 (Toxiproxy refuses browsers).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from aiohttp import web

from . import gojson
from .gojson import GoJSONError
from .link import DOWNSTREAM
from .proxy import (
    ERR_BAD_REQUEST_BODY,
    ERR_INVALID_TOXIC_TYPE,
    ERR_MISSING_FIELD,
    ERR_TOXIC_ALREADY_EXISTS,
    ERR_TOXIC_NOT_FOUND,
    ApiError,
    ToxicSpec,
    Toxiproxy,
    parse_direction,
)
from .toxics import TOXIC_TYPES

log = logging.getLogger(__name__)

CORE_KEY = web.AppKey("toxiproxy_core", Toxiproxy)

PROXY_FIELDS = {"name": "string", "listen": "string", "upstream": "string", "enabled": "bool"}
TOXIC_FIELDS = {"name": "string", "type": "string", "stream": "string", "toxicity": "float32"}
TOXIC_UPDATE_FIELDS = {"toxicity": "float32"}

_XID_ALPHABET = "0123456789abcdefghijklmnopqrstuv"


def _request_id() -> str:
    return "".join(secrets.choice(_XID_ALPHABET) for _ in range(20))


# ---- responses --------------------------------------------------------------------------------


def json_response(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=gojson.dumps(value).encode(), status=status, headers={"Content-Type": "application/json"})


def error_response(err: ApiError) -> web.Response:
    body = gojson.dumps({"error": err.message, "status": err.status}) + "\n"
    return web.Response(
        body=body.encode(),
        status=err.status,
        headers={"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"},
    )


def no_content() -> web.Response:
    return web.Response(status=204)


async def read_json(request: web.Request) -> Any:
    try:
        return gojson.loads_first(await request.read())
    except GoJSONError as exc:
        raise ERR_BAD_REQUEST_BODY.joined(str(exc)) from None


def bad_body(exc: GoJSONError) -> ApiError:
    return ERR_BAD_REQUEST_BODY.joined(str(exc))


def decode_body(obj: Any, fields: dict[str, str], into: dict[str, Any], struct: str, go_type: str) -> None:
    """gojson.decode_struct, answering a decoding error as a bad request body."""
    try:
        gojson.decode_struct(obj, fields, into, struct, go_type)
    except GoJSONError as exc:
        raise bad_body(exc) from None


# ---- middleware -------------------------------------------------------------------------------


@web.middleware
async def toxiproxy_middleware(request: web.Request, handler) -> web.StreamResponse:
    try:
        if request.headers.get("User-Agent", "").startswith("Mozilla/"):
            response: web.StreamResponse = web.Response(
                text="User agent not allowed\n", status=403, content_type="text/plain", charset="utf-8"
            )
        else:
            response = await handler(request)
    except web.HTTPMethodNotAllowed:
        response = web.Response(status=405)
    except web.HTTPNotFound:
        response = web.Response(text="404 page not found\n", status=404, content_type="text/plain", charset="utf-8")
    except ApiError as err:
        response = error_response(err)
    response.headers["X-Toxiproxy-Request-Id"] = _request_id()
    return response


# ---- handlers ---------------------------------------------------------------------------------


async def version(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    body = '{"version": "%s"}\n' % core.version
    return web.Response(body=body.encode(), headers={"Content-Type": "application/json;charset=utf-8"})


async def proxy_index(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    return json_response({name: core.proxies[name].to_json() for name in sorted(core.proxies)})


async def proxy_create(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    body = await read_json(request)
    fields: dict[str, Any] = {"name": "", "listen": "", "upstream": "", "enabled": True}
    decode_body(body, PROXY_FIELDS, fields, "Proxy", "toxiproxy.Proxy")
    if not fields["name"]:
        raise ERR_MISSING_FIELD.joined("name")
    if not fields["upstream"]:
        raise ERR_MISSING_FIELD.joined("upstream")
    async with core.lock:
        proxy = await core.create(fields["name"], fields["listen"], fields["upstream"], fields["enabled"])
    return json_response(proxy.to_json(), status=201)


async def populate(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    created: list = []
    error: ApiError | None = None
    try:
        body = await read_json(request)
        items = _decode_populate(body)
        async with core.lock:
            for item in items:
                created.append(await core.add_or_replace(**item))
    except ApiError as err:
        error = err
    answer: dict[str, Any] = {}
    if error is not None:
        answer.update({"error": error.message, "status": error.status})
    # Go marshals an empty (nil) slice of proxies as null.
    answer["proxies"] = [p.to_json() for p in created] or None
    return json_response(answer, status=error.status if error is not None else 201)


def _decode_populate(body: Any) -> list[dict[str, Any]]:
    go_type = 'struct { toxiproxy.Proxy; Enabled *bool "json:\\"enabled\\"" }'
    if body is None:
        return []
    if not isinstance(body, list):
        raise bad_body(gojson.go_value_error(body, "[]" + go_type))
    items = []
    for entry in body:
        fields: dict[str, Any] = {"name": "", "listen": "", "upstream": "", "enabled": None}
        decode_body(entry, PROXY_FIELDS, fields, "Proxy", go_type)
        items.append(fields)
    for i, fields in enumerate(items, start=1):
        if not fields["name"]:
            raise ERR_MISSING_FIELD.joined(f"name at proxy {i}")
        if not fields["upstream"]:
            raise ERR_MISSING_FIELD.joined(f"upstream at proxy {i}")
        if fields["enabled"] is None:
            fields["enabled"] = True
    return items


async def proxy_show(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    return json_response(core.get(request.match_info["proxy"]).to_json())


async def proxy_update(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    async with core.lock:
        proxy = core.get(request.match_info["proxy"])
        body = await read_json(request)
        fields: dict[str, Any] = {
            "name": proxy.name,
            "listen": proxy.listen,
            "upstream": proxy.upstream,
            "enabled": proxy.enabled,
        }
        decode_body(body, PROXY_FIELDS, fields, "Proxy", "toxiproxy.Proxy")
        await proxy.update(fields["listen"], fields["upstream"], fields["enabled"])
        return json_response(proxy.to_json())


async def proxy_delete(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    async with core.lock:
        await core.delete(request.match_info["proxy"])
    return no_content()


async def reset(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    async with core.lock:
        await core.reset()
    return no_content()


async def toxic_index(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    return json_response(core.get(request.match_info["proxy"]).toxic_list())


async def toxic_create(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    async with core.lock:
        proxy = core.get(request.match_info["proxy"])
        body = await read_json(request)
        fields: dict[str, Any] = {"name": "", "type": "", "stream": DOWNSTREAM, "toxicity": 1.0}
        decode_body(body, TOXIC_FIELDS, fields, "ToxicWrapper", "toxics.ToxicWrapper")
        direction = parse_direction(fields["stream"])
        if not fields["name"]:
            fields["name"] = f"{fields['type']}_{fields['stream']}"
        toxic_type = TOXIC_TYPES.get(fields["type"])
        if toxic_type is None:
            raise ERR_INVALID_TOXIC_TYPE.new()
        if proxy.find_toxic(fields["name"]) is not None:
            raise ERR_TOXIC_ALREADY_EXISTS.new()
        attributes = toxic_type.default_attributes()
        _decode_attributes(body, toxic_type.name, attributes)
        spec = ToxicSpec(
            name=fields["name"],
            type=fields["type"],
            stream=fields["stream"],
            toxicity=fields["toxicity"],
            attributes=attributes,
            direction=direction,
        )
        proxy.add_toxic(spec)
        return json_response(spec.to_json())


def _attributes_of(body: Any) -> Any:
    if not isinstance(body, dict):
        return None
    if "attributes" in body:
        return body["attributes"]
    return next((v for k, v in body.items() if k.lower() == "attributes"), None)


def _decode_attributes(body: Any, toxic_type: str, attributes: dict[str, int]) -> None:
    """Decode the body's "attributes" into a toxic's attribute struct (defaults already set)."""
    t = TOXIC_TYPES[toxic_type]
    decode_body(_attributes_of(body), t.fields, attributes, t.go_struct, f"toxics.{t.go_struct}")


def _toxic_of(proxy, request: web.Request) -> ToxicSpec:
    """The toxic the path names, on `proxy`."""
    spec = proxy.find_toxic(request.match_info["toxic"])
    if spec is None:
        raise ERR_TOXIC_NOT_FOUND.new()
    return spec


async def toxic_show(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    return json_response(_toxic_of(core.get(request.match_info["proxy"]), request).to_json())


async def toxic_update(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    async with core.lock:
        proxy = core.get(request.match_info["proxy"])
        spec = _toxic_of(proxy, request)
        body = await read_json(request)
        toxic_type = TOXIC_TYPES[spec.type]
        attributes = dict(spec.attributes)
        fields = {"toxicity": spec.toxicity}
        decode_body(body, TOXIC_UPDATE_FIELDS, fields, "ToxicWrapper", "toxics.ToxicWrapper")
        _decode_attributes(body, toxic_type.name, attributes)
        spec.attributes = attributes
        spec.toxicity = fields["toxicity"]
        await proxy.update_toxic(spec)
        return json_response(spec.to_json())


async def toxic_delete(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    async with core.lock:
        proxy = core.get(request.match_info["proxy"])
        spec = _toxic_of(proxy, request)
        await proxy.remove_toxic(spec)
    return no_content()


async def metrics(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    return web.Response(
        body=core.metrics_text().encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )


def make_app(core: Toxiproxy) -> web.Application:
    app = web.Application(middlewares=[toxiproxy_middleware])
    app[CORE_KEY] = core
    r = app.router
    r.add_post("/reset", reset)
    r.add_get("/proxies", proxy_index, allow_head=False)
    r.add_post("/proxies", proxy_create)
    r.add_post("/populate", populate)
    r.add_get("/proxies/{proxy}", proxy_show, allow_head=False)
    r.add_post("/proxies/{proxy}", proxy_update)
    r.add_patch("/proxies/{proxy}", proxy_update)
    r.add_delete("/proxies/{proxy}", proxy_delete)
    r.add_get("/proxies/{proxy}/toxics", toxic_index, allow_head=False)
    r.add_post("/proxies/{proxy}/toxics", toxic_create)
    r.add_get("/proxies/{proxy}/toxics/{toxic}", toxic_show, allow_head=False)
    r.add_post("/proxies/{proxy}/toxics/{toxic}", toxic_update)
    r.add_patch("/proxies/{proxy}/toxics/{toxic}", toxic_update)
    r.add_delete("/proxies/{proxy}/toxics/{toxic}", toxic_delete)
    r.add_get("/version", version, allow_head=False)
    r.add_get("/metrics", metrics, allow_head=False)
    return app
