"""A Python node with one contract violation planted, for the conformance suite's own tests:
`python tests/contract_planted.py VIOLATION --config FILE`.

- missing-endpoint: GET /streams is not served (404);
- malformed-event: node_start's incarnation is written as a string.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def plant(violation: str) -> None:
    if violation == "missing-endpoint":
        from aiohttp import web

        from splitbrain.node.runtime import admin

        async def gone(self, request):
            return web.json_response({"error": "not found", "field": None}, status=404)

        admin.AdminServer.streams = gone
    elif violation == "malformed-event":
        from splitbrain.node.runtime import node as runtime

        original_make = runtime.make_event

        def make_event(t, node, proto, kind, **fields):
            if kind == "node_start":
                fields["incarnation"] = str(fields.get("incarnation"))
            return original_make(t, node, proto, kind, **fields)

        runtime.make_event = make_event
    else:
        raise SystemExit(f"unknown violation {violation!r}")


if __name__ == "__main__":
    plant(sys.argv[1])
    from splitbrain.node.runtime.runner import main

    raise SystemExit(main(sys.argv[2:]))
