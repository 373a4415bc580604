"""Running the Toxiproxy-compatible server: in an event loop, in a thread, or as a process.

# async code (tests, the harness's asyncio parts)
server = ToxiproxyServer("127.0.0.1", 0)
await server.start()            # server.port is the real port
...
await server.stop()

# sync code: a thread with its own loop
with ToxiproxyServer.running("127.0.0.1", 0) as tp:
    toxiproxy.api.APIConsumer.host, toxiproxy.api.APIConsumer.port = tp.host, tp.port

# a process: python -m splitbrain.faults.toxiproxy --host 127.0.0.1 --port 8474
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

from aiohttp import web

from .api import make_app
from .proxy import VERSION, ApiError, Toxiproxy

log = logging.getLogger(__name__)


class ToxiproxyServer:
    """The HTTP API plus the proxies it manages, on the running event loop."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8474,
        *,
        seed: int | None = None,
        version: str = VERSION,
        config: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.config = config
        self.core = Toxiproxy(seed=seed, version=version)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("ToxiproxyServer already started")
        runner = web.AppRunner(make_app(self.core), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info("Toxiproxy-compatible server %s listening on %s", self.core.version, self.url)
        if self.config:
            await self.populate_file(self.config)

    async def populate_file(self, path: str) -> None:
        """Create the proxies of a Toxiproxy config file (the server's -config option)."""
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
        async with self.core.lock:
            for entry in entries:
                try:
                    await self.core.add_or_replace(
                        entry["name"], entry.get("listen", ""), entry["upstream"], entry.get("enabled", True)
                    )
                except ApiError as err:
                    log.error("populate from %s: proxy %s: %s", path, entry.get("name"), err.message)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        try:
            await self.core.shutdown()
        finally:
            if runner is not None:
                await runner.cleanup()

    async def serve_forever(self) -> None:
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def __aenter__(self) -> ToxiproxyServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @classmethod
    @contextlib.contextmanager
    def running(cls, host: str = "127.0.0.1", port: int = 0, **kwargs: Any) -> Iterator[ThreadedToxiproxyServer]:
        """A server on its own thread and loop for the duration of a `with` block."""
        threaded = ThreadedToxiproxyServer(host, port, **kwargs)
        threaded.start()
        try:
            yield threaded
        finally:
            threaded.stop()


class ThreadedToxiproxyServer:
    """A `ToxiproxyServer` run by a daemon thread, for synchronous callers."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **kwargs: Any) -> None:
        self.server = ToxiproxyServer(host, port, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    def start(self, timeout_s: float = 10.0) -> None:
        if self._thread is not None:
            raise RuntimeError("already started")
        loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.server.start())
            except BaseException as exc:  # handed to the starting thread
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.server.stop())
                _cancel_remaining_tasks(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        thread = threading.Thread(target=main, name=f"toxiproxy-{self.server.host}:{self.server.port}", daemon=True)
        thread.start()
        if not started.wait(timeout_s):
            raise TimeoutError(f"Toxiproxy-compatible server did not start within {timeout_s} s")
        if failure:
            thread.join(timeout_s)
            raise failure[0]
        self._loop, self._thread = loop, thread

    def call(self, coro: Coroutine, timeout_s: float = 10.0) -> Any:
        """Run a coroutine on the server's loop (to inspect or change state) and return its result."""
        if self._loop is None:
            raise RuntimeError("not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        if thread.is_alive():
            raise TimeoutError(f"Toxiproxy-compatible server did not stop within {timeout_s} s")

    def __enter__(self) -> ThreadedToxiproxyServer:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _cancel_remaining_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still pending on a loop about to close, and let it finish."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
