"""`python -m splitbrain.faults.toxiproxy`: the Toxiproxy-compatible server as a process.

Accepts toxiproxy-server's own flags too (`-host 0.0.0.0 -port 8474 -config file.json`), so a
compose file or script written for the real binary can start this one instead.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from .proxy import VERSION
from .server import ToxiproxyServer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m splitbrain.faults.toxiproxy",
        description=f"splitbrain's Toxiproxy-compatible server (API and toxics of Toxiproxy {VERSION}).",
    )
    parser.add_argument("--host", "-host", default="localhost", help="host for the HTTP API (default localhost)")
    parser.add_argument(
        "--port", "-port", type=int, default=8474, help="port for the HTTP API; 0 picks one (default 8474)"
    )
    parser.add_argument("--config", "-config", default=None, help="JSON file of proxies to create at start")
    parser.add_argument("--seed", "-seed", type=int, default=None, help="seed for toxicity and jitter randomness")
    parser.add_argument(
        "--proxy-metrics", "-proxy-metrics", action="store_true", help="accepted; /metrics is always on"
    )
    parser.add_argument(
        "--runtime-metrics", "-runtime-metrics", action="store_true", help="accepted; no runtime metrics"
    )
    parser.add_argument("--version", "-version", action="store_true", help="print the version and exit")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    server = ToxiproxyServer(args.host, args.port, seed=args.seed, config=args.config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    # One line on stdout tells a parent process where the API listens (useful with --port 0).
    print(f"toxiproxy-compatible server listening on {server.host}:{server.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.version:
        print(f"toxiproxy-server version {VERSION} (splitbrain)")
        return 0
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        asyncio.run(_serve(args))
    except OSError as exc:
        print(f"toxiproxy: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
