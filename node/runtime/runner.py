"""Running a node as a process: event loop (uvloop when importable), signals, exit codes.

Exit codes: 0 after a graceful stop (SIGTERM or SIGINT), 2 for a configuration error (the message
names the key, e.g. `admin_token` for an admin API on a non-loopback address without one), 1 for
anything unexpected. Once the node is up, one JSON line goes to stdout:
{"ready": true, "node", "incarnation", "pid", "bind", "admin", "transport"}, so a launcher that
asked for port 0 learns the ports; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import sys
from collections.abc import Callable

from ..protocols import RegistryError
from .config import ConfigError, NodeConfig, env_overrides, is_loopback, load_config
from .node import Node

log = logging.getLogger("splitbrain.node.runtime")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2


class GcPolicy:
    """Garbage collection for a daemon that allocates a few objects per message.

    CPython's automatic collector traverses every container object once in generation 0 and
    again when it is promoted, which costs about 15 % of the message path at full speed even
    though protocol messages form no reference cycles. A timed generation-0 collection is no
    cure where messages live for seconds (NAKACK2 keeps every multicast until STABLE purges it):
    each one traverses the last second's survivors, 45-100 ms per second at full speed with 5
    members. The daemon therefore turns automatic collection off, and every second moves all
    tracked objects to the permanent generation (gc.freeze: a list splice, no traversal), where
    reference counting still frees them; every `full_every` ticks it unfreezes and collects
    everything once, so cyclic garbage (asyncio and aiohttp make a few objects a second) lives
    at most that long.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, period_s: float = 1.0, full_every: int = 10):
        self.loop = loop
        self.period_s = period_s
        self.full_every = full_every
        self.ticks = 0
        self._handle: asyncio.TimerHandle | None = None
        self._was_enabled = gc.isenabled()

    def start(self) -> None:
        gc.collect()
        gc.freeze()
        gc.disable()
        self._handle = self.loop.call_later(self.period_s, self._tick)

    def _tick(self) -> None:
        self.ticks += 1
        if self.ticks % self.full_every == 0:
            gc.unfreeze()
            gc.collect()
        gc.freeze()
        self._handle = self.loop.call_later(self.period_s, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        gc.unfreeze()
        if self._was_enabled:
            gc.enable()


async def serve(config: NodeConfig, ready: Callable[[Node], None] | None = None, manage_gc: bool = True) -> int:
    """Start a node, run it until SIGTERM/SIGINT, stop it gracefully."""
    node = Node(config)
    await node.start()
    loop = asyncio.get_running_loop()
    gc_policy = GcPolicy(loop) if manage_gc else None
    if gc_policy is not None:
        gc_policy.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    if ready is not None:
        ready(node)
    waiter = loop.create_task(stop.wait())
    stopped = loop.create_task(node.wait_stopped())
    await asyncio.wait({waiter, stopped}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    stopped.cancel()
    await node.stop("stop")
    if gc_policy is not None:
        gc_policy.stop()
    return EXIT_OK


def _announce(node: Node) -> None:
    line = {
        "ready": True,
        "node": node.name,
        "incarnation": node.incarnation,
        "pid": os.getpid(),
        "bind": str(node.bind_address),
        "admin": str(node.admin_address),
        "transport": node.config.transport,
    }
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(config: NodeConfig, announce: bool = True) -> int:
    """Run a node in this process until it is stopped; returns the exit code."""
    with asyncio.Runner(loop_factory=_new_loop) as runner:
        try:
            return runner.run(serve(config, _announce if announce else None))
        except ConfigError as exc:
            print(f"node: config error: {exc}", file=sys.stderr)
            return EXIT_CONFIG


def build_parser() -> argparse.ArgumentParser:
    """The options of `python -m splitbrain.node` (and `splitbrain node`, which hands its arguments here)."""
    parser = argparse.ArgumentParser(prog="python -m splitbrain.node", description="Run one splitbrain protocol node.")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="YAML or TOML node configuration (SPLITBRAIN_<KEY> environment variables override it)",
    )
    parser.add_argument("--check", action="store_true", help="validate the configuration, print it, exit")
    parser.add_argument("--log-level", default="INFO", help="logging level for stderr (default INFO)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_CONFIG if exc.code else EXIT_OK
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _found, unknown = env_overrides(dict(os.environ))
    for var in unknown:
        log.warning("ignoring environment variable %s: no such configuration key", var)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"node: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except RegistryError as exc:
        print(f"node: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.check:
        print(json.dumps(config.as_dict(), indent=2))
        return EXIT_OK
    if config.admin_token is None and not is_loopback(config.admin.host):
        # Only admin_open: true gets here; say it where the operator looks.
        log.warning(
            "admin API on %s has no admin_token (admin_open: true): anyone who reaches it may change "
            "views, faults and streams",
            config.admin,
        )
    try:
        return run(config)
    except KeyboardInterrupt:
        return EXIT_OK
