"""Helpers to run real nodes in tests and benchmarks: unique loopback addresses, free ports,
`python -m splitbrain.node` subprocesses and a small synchronous admin client.

Every address is a fresh 127.x.y.z (Linux routes all of 127/8 to the loopback interface), so
tests running in parallel (pytest-xdist) never share an address, and a port picked by binding
port 0 cannot be taken by another test in between.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from ..errors import RunFailed
from .config import TOKEN_HEADER

if TYPE_CHECKING:
    from .node import Node

T = TypeVar("T")

_rng = random.Random(int.from_bytes(os.urandom(8), "big"))
_used: set[str] = set()
_lock = threading.Lock()


def unique_host() -> str:
    """A loopback address no other caller of this function (in any process) is likely to use."""
    with _lock:
        while True:
            host = f"127.{_rng.randint(10, 250)}.{_rng.randint(1, 254)}.{_rng.randint(1, 254)}"
            if host not in _used:
                _used.add(host)
                return host


def free_port(host: str, kind: str = "both") -> int:
    """A port free for UDP and TCP (kind "both"), or for one of them, on `host`."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind((host, 0))
            port: int = tcp.getsockname()[1]
            if kind == "tcp":
                return port
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                    udp.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host}")


class AdminError(RunFailed, RuntimeError):
    def __init__(self, status: int, body: Any):
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class AdminClient:
    """Synchronous JSON client for a node's admin API (urllib, no extra dependency)."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(
        self, method: str, path: str, body: Any = None, token: str | None | bool = True, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        tok = self.token if token is True else (token or None)
        if tok:
            req.add_header(TOKEN_HEADER, tok)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, _decode(resp.read(), resp.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read(), exc.headers.get("Content-Type", ""))

    def get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        if status != 200:
            raise AdminError(status, body)
        return body

    def post(self, path: str, body: Any = None, expect: int | tuple[int, ...] = (200, 201, 202)) -> Any:
        status, out = self.request("POST", path, body if body is not None else {})
        if status not in (expect if isinstance(expect, tuple) else (expect,)):
            raise AdminError(status, out)
        return out

    def delete(self, path: str) -> int:
        return self.request("DELETE", path)[0]


def _decode(data: bytes, content_type: str) -> Any:
    if "json" in content_type:
        return json.loads(data)
    return data.decode(errors="replace")


class NodeProcess:
    """`python -m splitbrain.node --config <file>` in a subprocess; `start()` waits for its ready line."""

    def __init__(
        self,
        config: dict[str, Any],
        workdir: str | os.PathLike[str] | None = None,
        env: dict[str, Any] | None = None,
        python: str = sys.executable,
        extra_args: list[str] | None = None,
    ):
        self.config = dict(config)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="splitbrain-node-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.python = python
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] | None = None
        self.name: str = self.config.get("name", "node")
        self.config_path = self.workdir / f"{self.name}.json.yaml"
        self.stderr_path = self.workdir / f"{self.name}.stderr"

    def start(self, timeout: float = 20.0) -> NodeProcess:
        # JSON is YAML: the file needs no YAML library on the writing side.
        self.config_path.write_text(json.dumps(self.config))
        env = dict(os.environ if self.env is None else self.env)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._stderr: BinaryIO | None = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [self.python, *self.extra_args, "-m", "splitbrain.node", "--config", str(self.config_path)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=root,
        )
        line = _readline_with_timeout(self.proc, timeout)
        if not line:
            code = self.proc.poll()
            self.kill()
            raise RuntimeError(f"node {self.name} did not start (exit code {code}):\n{self.stderr_tail()}")
        self.ready = json.loads(line)
        return self

    @property
    def admin_url(self) -> str:
        assert self.ready is not None, "start() first"
        return f"http://{self.ready['admin']}"

    def client(self, token: str | None = None) -> AdminClient:
        return AdminClient(self.admin_url, token if token is not None else self.config.get("admin_token"))

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self._finish()

    def kill(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        return self._finish()

    def _finish(self) -> int | None:
        assert self.proc is not None
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        stderr = getattr(self, "_stderr", None)
        if stderr is not None:
            stderr.close()
            self._stderr = None
        return self.proc.returncode

    def stderr_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> NodeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _readline_with_timeout(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    out: list[bytes] = []
    stdout = proc.stdout
    assert stdout is not None, "started with stdout=PIPE"

    def reader() -> None:
        out.append(stdout.readline())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout)
    return out[0] if out else b""


def run_python_m_node(
    args: list[str], env: dict[str, Any] | None = None, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run `python -m splitbrain.node ARGS` to completion (config validation tests)."""
    full_env = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[2])
    full_env["PYTHONPATH"] = root + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    return subprocess.run(
        [sys.executable, "-m", "splitbrain.node", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=root,
    )


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.05, what: str = "condition") -> T:
    """Poll `predicate()` (tenacity) until it returns a truthy value; raise TimeoutError saying
    what was expected and the last value seen."""
    import tenacity

    last: list[Any] = [None]

    def attempt() -> T | None:
        try:
            value = last[0] = predicate()
        except Exception as exc:  # a node that is starting may refuse connections
            last[0] = exc
            return None
        return value

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout),
        wait=tenacity.wait_fixed(interval),
        retry=tenacity.retry_if_result(lambda value: not value),
        reraise=True,
    )
    try:
        return retrying(attempt)  # type: ignore[return-value]  # retried until truthy, so never None
    except tenacity.RetryError:
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last seen: {last[0]!r}") from None


# ---- in-process nodes (asyncio) ---------------------------------------------------------------


async def wait_until(
    predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.02, what: str = "condition"
) -> T:
    """Async polling with a bound: await until `predicate()` is truthy, else TimeoutError naming
    what was expected and the last value seen."""
    import asyncio

    last: list[Any] = [None]

    async def poll() -> T:
        while True:
            value = last[0] = predicate()
            if value:
                return value
            await asyncio.sleep(interval)

    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last seen: {last[0]!r}") from None


def pair_configs(
    workdir: str | os.PathLike[str],
    transport: str = "udp",
    names: Sequence[str] = ("A", "B"),
    event_log: bool = True,
    token: str | None = "test-token",
    protocol_config: dict[str, Any] | None = None,
    **extra: Any,
) -> list[dict[str, Any]]:
    """Configurations of a full mesh of nodes on fresh loopback addresses (free ports picked now)."""
    import time as _time

    hosts = {n: unique_host() for n in names}
    ports = {n: free_port(hosts[n]) for n in names}
    epoch = _time.time()
    configs = []
    for n in names:
        cfg: dict[str, Any] = {
            "name": n,
            "bind": f"{hosts[n]}:{ports[n]}",
            "admin": f"{hosts[n]}:0",
            "transport": transport,
            "peers": {p: f"{hosts[p]}:{ports[p]}" for p in names if p != n},
            "epoch": epoch,
            "event_log": event_log,
            "config": dict(protocol_config or {}),
            **extra,
        }
        if token is not None:
            cfg["admin_token"] = token
        if event_log:
            cfg["events"] = str(Path(workdir) / n / "events.jsonl")
        configs.append(cfg)
    return configs


class NodeGroup:
    """Several in-process nodes on the running loop; `async with NodeGroup(configs) as (a, b):`."""

    def __init__(self, configs: list[dict[str, Any]]):
        from .config import NodeConfig
        from .node import Node

        self.nodes = [Node(NodeConfig.from_dict(c, env={})) for c in configs]

    async def __aenter__(self) -> list[Node]:
        started = []
        try:
            for node in self.nodes:
                await node.start()
                started.append(node)
        except BaseException:
            for node in started:
                await node.stop()
            raise
        return self.nodes

    async def __aexit__(self, *exc: object) -> None:
        for node in self.nodes:
            await node.stop()
