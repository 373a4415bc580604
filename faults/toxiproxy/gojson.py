"""JSON the way Toxiproxy's Go server reads and writes it.

Clients (and our conformance suite) compare bodies, so the small habits of `encoding/json` matter:

- output is compact (`{"a":1}`), keeps struct field order, sorts map keys, escapes `<`, `>`
  and `&`, and writes a float32 with an integral value as an integer (`"toxicity":1`);
- input is decoded with `json.Decoder.Decode`: only the first JSON value of the body is read,
  unknown fields are ignored, field names match case-insensitively (an exact match wins), `null`
  leaves a field at its default, and a value of the wrong type is an error whose text names the
  Go field ("json: cannot unmarshal string into Go struct field Proxy.name of type string").

Decoding errors are raised as `GoJSONError`; the API wraps them as "bad request body: ...".
"""

from __future__ import annotations

import json
import math
from typing import Any

from splitbrain.node.errors import BadInput

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_DECODER = json.JSONDecoder()


class GoJSONError(BadInput, ValueError):
    """A body Go's json.Decoder would refuse; str() is Go's message."""


def dumps(value: Any) -> str:
    """Compact JSON with Go's escaping of <, > and &."""
    text = json.dumps(_go_numbers(value), separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _go_numbers(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value == int(value) and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {k: _go_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_numbers(v) for v in value]
    return value


def loads_first(body: bytes | str) -> Any:
    """Decode the first JSON value of `body`, ignoring whatever follows it (json.Decoder.Decode)."""
    if isinstance(body, bytes):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GoJSONError("invalid character in string literal") from exc
    else:
        text = body
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        raise GoJSONError("EOF")
    try:
        value, _end = _DECODER.raw_decode(stripped)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(stripped):
            raise GoJSONError("unexpected EOF") from exc
        raise GoJSONError(f"invalid character '{stripped[exc.pos]}' looking for beginning of value") from exc
    return value


def json_kind(value: Any) -> str:
    """The JSON type name Go uses in UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def go_value_error(value: Any, go_type: str) -> GoJSONError:
    return GoJSONError(f"json: cannot unmarshal {json_kind(value)} into Go value of type {go_type}")


def _field_error(value: Any, struct: str, field: str, go_type: str) -> GoJSONError:
    kind = json_kind(value)
    if kind == "number" and go_type in ("int", "int64"):
        kind = f"number {json.dumps(value)}"
    return GoJSONError(f"json: cannot unmarshal {kind} into Go struct field {struct}.{field} of type {go_type}")


def _convert(value: Any, go_type: str, struct: str, field: str) -> Any:
    if go_type == "string":
        if isinstance(value, str):
            return value
    elif go_type == "bool":
        if isinstance(value, bool):
            return value
    elif go_type in ("int", "int64"):
        # Go refuses 1.0 for an integer field; json.loads gives a float for it, so refusing floats
        # is exactly Go's rule.
        if isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX:
            return value
    elif go_type == "float32":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    else:  # pragma: no cover - a programming error in a field table
        raise AssertionError(f"unknown Go type {go_type}")
    raise _field_error(value, struct, field, go_type)


def decode_struct(obj: Any, fields: dict[str, str], into: dict[str, Any], struct: str, go_type: str) -> dict[str, Any]:
    """Decode a JSON object into `into` (defaults already set) like Go decodes into a struct.

    `fields` maps each JSON field name to its Go type ("string", "bool", "int64", "int",
    "float32"). Returns `into`. Like Go, a type error does not stop the other fields from being
    decoded, but the first one is raised at the end.
    """
    if obj is None:
        return into
    if not isinstance(obj, dict):
        raise go_value_error(obj, go_type)
    first_error: GoJSONError | None = None
    for key, value in obj.items():
        name = key if key in fields else next((f for f in fields if f.lower() == key.lower()), None)
        if name is None or value is None:
            continue
        try:
            into[name] = _convert(value, fields[name], struct, name)
        except GoJSONError as exc:
            first_error = first_error or exc
    # Go resolves duplicate keys by "last one wins" over the case-folded name, and our loop does the
    # same because dict order is body order.
    if first_error is not None:
        raise first_error
    return into
