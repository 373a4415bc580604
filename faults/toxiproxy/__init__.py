"""splitbrain's Toxiproxy-compatible server, for machines without `toxiproxy-server`.

It answers Toxiproxy 2.x's REST API (proxies, populate, toxics, reset, version, metrics) with the
same JSON, status codes and error bodies, and applies the same toxics (latency, bandwidth,
slow_close, timeout, reset_peer, slicer, limit_data, noop) to live TCP connections, so the
`toxiproxy-python` client and the harness drive it exactly as they drive the real server.
tests/faults/test_toxiproxy_conformance.py runs the same suite against both.

Start it with `python -m splitbrain.faults.toxiproxy [--host H] [--port P]`, or in-process:
`await ToxiproxyServer(host, port).start()`, or `with ToxiproxyServer.running(host, 0) as tp:`.
"""

from .proxy import VERSION
from .server import ThreadedToxiproxyServer, ToxiproxyServer

__all__ = ["VERSION", "ThreadedToxiproxyServer", "ToxiproxyServer"]
