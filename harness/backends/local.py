"""The local backend: one `python -m splitbrain.node` process per node, each on its own loopback address.

Addresses. Linux routes all of 127.0.0.0/8 to the loopback interface, so node i of a cluster gets
127.X.Y.(i+1) with X.Y drawn at random per cluster: parallel test sessions (pytest-xdist, two
terminals) never share an address, and every node can use the same fixed ports (7800 for the
protocol, 8800 for the admin API), just as containers would. Before starting, every address is
probed; if a node still finds its address taken when it starts, the whole cluster retries on
another X.Y.

Files. Under `run_dir/nodes/<name>/`: `node.yaml` (the configuration of the current
incarnation), `node.log` (stdout and stderr of every incarnation, each introduced by a header
line), and while an incarnation runs, `events-inc<N>.jsonl`, its own event log. When an
incarnation ends, its log (plus the node_stop the harness writes for a killed node) is appended
to `events.jsonl` and the part is removed, so a finished run has exactly the layout of a run directory (docs/cli.md).

Kills. A node writes its event log every 100 ms and always before it sends an ACK, so a kill -9
may lose its last events but never the delivery records behind an ACK its peers have seen.

No orphans. Each node runs in its own session (process group), so SIGKILL/SIGSTOP reach all of
it and a Ctrl-C in the terminal reaches only the harness, which then stops the nodes in order.
The kernel kills a node whose parent dies (PR_SET_PDEATHSIG), which covers a harness killed with
-9. Teardown runs from `finally`, from `with`, and from an atexit hook as a last resort.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import os
import random
import signal
import socket
import subprocess
import sys
import weakref
from collections.abc import Set
from pathlib import Path

import yaml

from splitbrain.harness.poll import EventuallyTimeout, eventually
from splitbrain.harness.scenario import Scenario
from splitbrain.node import protocols
from splitbrain.node.protocols import ENV_PROTOCOLS

from .admin import AdminError
from .base import (
    Backend,
    BackendError,
    Cluster,
    ClusterOptions,
    NodeAddressInUse,
    NodeCrashed,
    NodeHandle,
    NodeStartError,
    NodeState,
    SyntheticEvents,
    signals_deferred,
)

PROTOCOL_PORT = 7800
ADMIN_PORT = 8800
START_ATTEMPTS = 5  # subnets tried when an address turns out to be taken
HEALTH_POLL_S = 0.02  # a failed probe (connection refused) costs well under 1 ms
_ADDRESS_IN_USE = ("Address already in use", "[Errno 98]", "EADDRINUSE")
_PR_SET_PDEATHSIG = 1

_LIVE_CLUSTERS: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


def _load_libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - not Linux
        return None


_LIBC = _load_libc()


def _child_setup() -> None:
    """Runs in the child between fork and exec: die with the parent, take default signals."""
    if _LIBC is not None and sys.platform.startswith("linux"):
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The harness may hold SIGINT/SIGTERM (signals_deferred) while it spawns; the node must not.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def node_ip(x: int, y: int, index: int) -> str:
    """The loopback address of node `index` in subnet 127.x.y.0 (spilling into y+1 past 254)."""
    return f"127.{x}.{(y + index // 254) % 256}.{index % 254 + 1}"


def _port_free(ip: str, port: int, kind: int) -> bool:
    sock = socket.socket(socket.AF_INET, kind)
    try:
        sock.bind((ip, port))
        return True
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        sock.close()


class LocalBackend(Backend):
    """Nodes as local processes. `python` is the interpreter that runs `-m splitbrain.node`."""

    name = "local"

    def __init__(
        self,
        *,
        python: str | None = None,
        protocol_port: int = PROTOCOL_PORT,
        admin_port: int = ADMIN_PORT,
        env: dict[str, str] | None = None,
    ):
        self.python = python or sys.executable
        self.protocol_port = protocol_port
        self.admin_port = admin_port
        self.env = env

    def check(self) -> tuple[bool, str]:
        problems = []
        try:
            for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                sock = socket.socket(socket.AF_INET, kind)
                try:
                    sock.bind(("127.0.0.2", 0))
                finally:
                    sock.close()
        except OSError as exc:
            problems.append(f"cannot bind 127.0.0.2 ({exc.strerror or exc})")
        try:
            proc = subprocess.run(
                [self.python, "-m", "splitbrain.node", "--help"],
                capture_output=True,
                text=True,
                timeout=60,
                env=self._env(),
            )
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                problems.append(f"`python -m splitbrain.node --help` exits {proc.returncode}: {tail[0]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"`python -m splitbrain.node --help` failed: {exc}")
        if problems:
            return False, "; ".join(problems)
        return True, "127.0.0.2 can be bound and `python -m splitbrain.node --help` works"

    def create_cluster(
        self,
        scenario: Scenario,
        run_dir: Path,
        *,
        seed: int,
        epoch: float | None = None,
        options: ClusterOptions | None = None,
    ) -> LocalCluster:
        if protocols.get(scenario.protocol).external:
            # JGroups nodes (one JVM each): harness/backends/jgroups.py.
            from .jgroups import JGroupsLocalCluster

            return JGroupsLocalCluster(scenario, run_dir, seed=seed, epoch=epoch, options=options, backend=self)
        return LocalCluster(scenario, run_dir, seed=seed, epoch=epoch, options=options, backend=self)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONUNBUFFERED"] = "1"
        # Overrides meant for a hand-started node must not leak into the harness's nodes.
        # (SPLITBRAIN_PROTOCOLS is not an override: it names the protocols the harness knows.)
        for var in [v for v in env if v.startswith("SPLITBRAIN_") and v != ENV_PROTOCOLS]:
            del env[var]
        # `python -m splitbrain.node` must find this checkout even when the harness runs from elsewhere.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env


class LocalCluster(Cluster):
    backend_name = "local"

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        *,
        seed: int,
        epoch: float | None,
        options: ClusterOptions | None,
        backend: LocalBackend,
    ):
        super().__init__(scenario, run_dir, seed=seed, epoch=epoch, options=options)
        self.backend = backend
        self._env = backend._env()
        self._procs: dict[str, subprocess.Popen] = {}
        self.subnet = self._pick_subnet()
        self._make_handles()
        _LIVE_CLUSTERS.add(self)

    # ---- addresses ----------------------------------------------------------------------------

    def _pick_subnet(self, avoid: Set[tuple[int, int]] = frozenset()) -> tuple[int, int]:
        rng = random.SystemRandom()
        n = len(self.scenario.nodes)
        ports = (
            (self.backend.protocol_port, socket.SOCK_DGRAM),
            (self.backend.protocol_port, socket.SOCK_STREAM),
            (self.backend.admin_port, socket.SOCK_STREAM),
        )
        for _ in range(100):
            # 127.0.x.x is where everything else on the machine lives; stay clear of it.
            x, y = rng.randint(1, 254), rng.randint(0, 255)
            if (x, y) in avoid:
                continue
            if all(_port_free(node_ip(x, y, i), port, kind) for i in range(n) for port, kind in ports):
                return x, y
        raise BackendError("no free 127.X.Y.0 subnet found for the local cluster after 100 tries")

    def _make_handles(self) -> None:
        x, y = self.subnet
        self.nodes = {}
        self._admins = {}
        for i, name in enumerate(self.scenario.nodes):
            ip = node_ip(x, y, i)
            self.nodes[name] = NodeHandle(
                name=name,
                address=f"{ip}:{self.backend.protocol_port}",
                admin_url=f"http://{ip}:{self.backend.admin_port}",
            )

    # ---- starting -----------------------------------------------------------------------------

    def start(self) -> None:
        tried: set[tuple[int, int]] = set()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                for name in self.nodes:
                    self._spawn(name, 1)
                for name in self.nodes:
                    self._wait_healthy(name)
                return
            except NodeAddressInUse:
                # Another cluster took one of our addresses between the probe and the bind.
                self._abandon_attempt()
                if attempt == START_ATTEMPTS:
                    raise
                tried.add(self.subnet)
                self.subnet = self._pick_subnet(tried)
                self._make_handles()

    def _abandon_attempt(self) -> None:
        for proc in list(self._procs.values()):
            _killpg(proc, signal.SIGKILL)
            _reap(proc)
        self._procs.clear()
        for name in self._parts:
            for _inc, path, _t in self._parts[name]:
                path.unlink(missing_ok=True)
            self._parts[name] = []
            self._synthetic[name] = SyntheticEvents()

    def _spawn(self, name: str, incarnation: int) -> None:
        handle = self.nodes[name]
        node_dir = self._node_dir(name)
        events = node_dir / f"events-inc{incarnation}.jsonl"
        events.unlink(missing_ok=True)
        peers = {p: h.address for p, h in self.nodes.items() if p != name}
        ip = handle.address.rsplit(":", 1)[0]
        config = self.node_config(
            name,
            bind=handle.address,
            admin=f"{ip}:{self.backend.admin_port}",
            peers=peers,
            events=str(events),
            incarnation=incarnation,
        )
        cmd = self._command(node_dir, config)
        t = self.now()
        with open(node_dir / "node.log", "ab") as log:
            log.write(
                f"--- splitbrain: {name} incarnation {incarnation} starting at t={t:.3f} "
                f"on {handle.address} (admin {handle.admin_url})\n".encode()
            )
            log.flush()
            # Between fork and the bookkeeping below an interrupt would leave an untracked node.
            with signals_deferred():
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_child_setup,
                    env=self._env,
                    close_fds=True,
                )
                self._procs[name] = proc
                self._parts[name].append((incarnation, events, t))
                handle.incarnation = incarnation
                handle.state = NodeState.RUNNING
                handle.started_at = t

    def _command(self, node_dir: Path, config: dict) -> list[str]:
        """Write an incarnation's configuration into its node directory; the command that starts it."""
        config_path = node_dir / "node.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return [self.backend.python, "-m", "splitbrain.node", "--config", str(config_path)]

    def _wait_healthy(self, name: str) -> None:
        handle = self.nodes[name]
        proc = self._procs[name]
        client = self.admin(name)
        timeout = self.options.start_timeout_s
        last: list[str] = ["no answer yet"]

        def healthy() -> bool:
            if proc.poll() is not None:
                raise _Exited(proc.returncode)
            try:
                reply = client.health(timeout_s=2.0)
            except AdminError as exc:
                last[0] = str(exc)
                return False
            if (
                not isinstance(reply, dict)
                or reply.get("status") != "ok"
                or reply.get("incarnation") != handle.incarnation
            ):
                last[0] = f"GET /health answered {reply!r}"
                return False
            return True

        try:
            eventually(healthy, timeout=timeout, interval=HEALTH_POLL_S)
        except _Exited as exc:
            handle.state = NodeState.DEAD
            tail = self.log_tail(name)
            cls = NodeAddressInUse if any(m in tail for m in _ADDRESS_IN_USE) else NodeStartError
            raise cls(
                f"node {name} (incarnation {handle.incarnation}) exited with code {exc.code} "
                f"while starting on {handle.address}; tail of {self._node_dir(name) / 'node.log'}:\n"
                f"{tail}"
            ) from None
        except EventuallyTimeout:
            raise NodeStartError(
                f"node {name} (incarnation {handle.incarnation}) did not answer GET {handle.admin_url}/health "
                f"within {timeout:g}s (expected status ok and incarnation {handle.incarnation}; last seen: "
                f"{last[0]}); tail of {self._node_dir(name) / 'node.log'}:\n{self.log_tail(name)}"
            ) from None

    # ---- lifecycle (the hooks Cluster's stop, kill, pause and resume use) ---------------------

    def _has_process(self, name: str) -> bool:
        return name in self._procs

    def _send_stop(self, name: str) -> None:
        proc = self._procs[name]
        if self.nodes[name].state is NodeState.PAUSED:
            _killpg(proc, signal.SIGCONT)
        _killpg(proc, signal.SIGTERM)

    def _wait_exit(self, name: str, timeout_s: float) -> int | None:
        try:
            return self._procs[name].wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _send_kill(self, name: str) -> int:
        proc = self._procs[name]
        _killpg(proc, signal.SIGKILL)
        _reap(proc)
        return proc.returncode

    def _freeze(self, name: str) -> None:
        _killpg(self._procs[name], signal.SIGSTOP)

    def _thaw(self, name: str) -> None:
        _killpg(self._procs[name], signal.SIGCONT)

    # ---- liveness -----------------------------------------------------------------------------

    def check_alive(self) -> None:
        for name, handle in self.nodes.items():
            proc = self._procs.get(name)
            if proc is None or not handle.alive or proc.poll() is None:
                continue
            handle.state = NodeState.DEAD
            self.exit_codes[name].append(proc.returncode)
            self._record_stop(name, "crashed")
            self._collect(name)
            raise NodeCrashed(
                f"node {name} (incarnation {handle.incarnation}) exited unexpectedly with code "
                f"{proc.returncode}; tail of {self._node_dir(name) / 'node.log'}:\n"
                f"{self.log_tail(name)}"
            )

    def pids(self) -> dict[str, int]:
        """Process ids of the current incarnations (for tests and diagnostics)."""
        return {name: proc.pid for name, proc in self._procs.items()}

    # ---- output -------------------------------------------------------------------------------

    no_output = "(no node.log)"

    def _output(self, name: str, lines: int) -> str | None:
        path = self.run_dir / "nodes" / name / "node.log"
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 16_384))
                return f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return None

    # ---- teardown -----------------------------------------------------------------------------

    def _teardown(self) -> None:
        try:
            problems = self.stop_all()
            self.problems.extend(problems)
        finally:
            # Whatever happened above, no process of this cluster may survive it.
            for name, proc in self._procs.items():
                if proc.poll() is None:
                    _killpg(proc, signal.SIGCONT)
                    _killpg(proc, signal.SIGKILL)
                _reap(proc)
                handle = self.nodes.get(name)
                if handle is not None and handle.alive:
                    handle.state = NodeState.DEAD
                    self._record_stop(name, "teardown_kill")
            try:
                self.collect_events()
            finally:
                _LIVE_CLUSTERS.discard(self)

    def kill_now(self) -> None:
        """Last resort (atexit): SIGKILL every process of this cluster, no collection."""
        for proc in self._procs.values():
            if proc.poll() is None:
                _killpg(proc, signal.SIGKILL)
            _reap(proc, timeout=2.0)


class _Exited(Exception):
    def __init__(self, code: int | None):
        self.code = code


def _killpg(proc: subprocess.Popen, sig: int) -> None:
    # Only while the process is not reaped: after that its pid (= group id) may belong to a
    # process that is none of ours.
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL always ends a process
        pass


@atexit.register
def _kill_leftovers() -> None:
    for cluster in list(_LIVE_CLUSTERS):
        cluster.kill_now()
