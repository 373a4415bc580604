"""Where a fault is applied: running a command inside a node's network namespace.

Every packet-level injector (iptables, tc, the NFQUEUE delayer) needs to run a program *in the
network namespace of the node it breaks*. How to get there depends on the backend, so it is a
plain callable, a `Runner`: `runner(argv) -> Result`. The ones provided:

- `host()`                 this process's own namespace;
- `netns(name)`            `ip netns exec NAME ...` (namespaces made with `ip netns add`);
- `nsenter(pid)`           `nsenter -t PID -n ...`: host binaries in another process's network
                           namespace (a container's, from `docker inspect -f {{.State.Pid}}`);
                           needs neither NET_ADMIN on the container nor tools in its image;
- `docker_exec(container)` `docker exec -u root CONTAINER ...`: the image's own tools, as root in
                           the container (needs `cap_add: [NET_ADMIN]` on it);
- `docker_sdk(container)`  the same through the docker SDK (`container.exec_run`), for code that
                           does not shell out.

A prefix runner can also start a long-lived helper in the namespace (`runner.popen(argv)`), which
the NFQUEUE delayer needs. Any other callable with the `Runner` signature works too (a Kubernetes
`kubectl exec`, an SSH hop).

`Lab` makes throwaway namespaces joined by veth pairs, for tests and for capability probes; it
deletes them all when its `with` block ends, whatever happened. `socket_in(ns, ...)` opens a socket
*inside* a namespace without a subprocess (setns in a short-lived thread: the network namespace is
per thread, and a socket keeps the namespace it was created in).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from splitbrain.node.errors import RunFailed

DEFAULT_TIMEOUT_S = 30.0
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
# Every namespace a Lab makes starts with this, so a leftover is recognisable (and removable).
LAB_PREFIX = "sbx"


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check(self) -> Result:
        if self.returncode != 0:
            raise CommandError(self)
        return self

    @property
    def message(self) -> str:
        """The first line of stderr (or stdout): what a tool says about its failure."""
        text = (self.stderr or self.stdout).strip()
        return text.splitlines()[0] if text else f"exit code {self.returncode}"


class CommandError(RunFailed, RuntimeError):
    def __init__(self, result: Result):
        output = (result.stderr or result.stdout).strip()
        super().__init__(f"{shlex.join(result.argv)} failed ({result.returncode}): {output}")
        self.result = result


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, input: str | None = None, timeout_s: float | None = None) -> Result: ...


class PrefixRunner:
    """Runs argv behind a fixed prefix of words (empty for the host's own namespace)."""

    def __init__(self, prefix: Sequence[str], label: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.prefix = tuple(prefix)
        self.label = label
        self.timeout_s = timeout_s

    def __call__(self, argv: Sequence[str], *, input: str | None = None, timeout_s: float | None = None) -> Result:
        full = self.prefix + tuple(argv)
        try:
            proc = subprocess.run(
                full,
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout_s or self.timeout_s,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            return Result(full, 127, "", f"{exc.filename}: not found")
        except subprocess.TimeoutExpired:
            return Result(full, 124, "", f"timed out after {timeout_s or self.timeout_s:g} s")
        return Result(full, proc.returncode, proc.stdout, proc.stderr)

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start a long-lived program in the namespace (the caller owns and ends it)."""
        return subprocess.Popen(self.prefix + tuple(argv), **kwargs)

    def __repr__(self) -> str:
        return f"<runner {self.label}>"


def host(timeout_s: float = DEFAULT_TIMEOUT_S) -> PrefixRunner:
    return PrefixRunner((), "host", timeout_s)


def netns(name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> PrefixRunner:
    return PrefixRunner(("ip", "netns", "exec", name), f"netns {name}", timeout_s)


def nsenter(pid: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> PrefixRunner:
    return PrefixRunner(("nsenter", "-t", str(int(pid)), "-n"), f"nsenter {pid}", timeout_s)


def docker_exec(
    container: str, user: str = "root", docker: str = "docker", timeout_s: float = DEFAULT_TIMEOUT_S
) -> PrefixRunner:
    return PrefixRunner((docker, "exec", "-i", "-u", user, container), f"docker exec {container}", timeout_s)


def docker_sdk(container, user: str = "root") -> Callable[..., Result]:
    """A Runner over a docker SDK Container (no shelling out); it cannot popen."""

    def run(argv: Sequence[str], *, input: str | None = None, timeout_s: float | None = None) -> Result:
        if input is not None:
            raise ValueError("docker_sdk runner cannot pass standard input")
        code, (out, err) = container.exec_run(list(argv), user=user, demux=True)
        return Result(tuple(argv), code, (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace"))

    run.label = f"docker sdk {getattr(container, 'name', container)}"  # type: ignore[attr-defined]
    return run


# ---- throwaway namespaces ---------------------------------------------------------------------------

_counter = itertools.count()


def unique_name(prefix: str = LAB_PREFIX) -> str:
    """A namespace name unique on this host across processes and tests (pid + counter)."""
    return f"{prefix}{os.getpid()}-{next(_counter)}"


def can_make_namespaces() -> tuple[bool, str]:
    """Whether `ip netns add` can work here, and why not."""
    if os.geteuid() != 0:
        return False, "not root (ip netns add needs CAP_SYS_ADMIN)"
    probe = host(10)(["ip", "-V"])
    if not probe.ok:
        return False, f"iproute2 missing: {probe.message}"
    name = unique_name(LAB_PREFIX + "probe")
    made = host(10)(["ip", "netns", "add", name])
    try:
        if not made.ok:
            return False, f"ip netns add failed: {made.message}"
        return True, "ip netns add works"
    finally:
        if made.ok:
            host(10)(["ip", "netns", "delete", name])


class Lab:
    """Throwaway network namespaces joined by veth pairs; deleted on exit, whatever happened.

        with Lab() as lab:
            a, b = lab.add("a"), lab.add("b")
            lab.link(a, b, "198.18.0.1", "198.18.0.2")
            lab.run(a, ["ping", "-c1", "198.18.0.2"])

    Addresses live only inside the lab's namespaces, so two labs may use the same ones.
    """

    def __init__(self, prefix: str = LAB_PREFIX):
        self.prefix = prefix
        self.names: list[str] = []
        self._links = itertools.count()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, label: str = "ns") -> str:
        name = unique_name(self.prefix)
        host()(["ip", "netns", "add", name]).check()
        self.names.append(name)
        netns(name)(["ip", "link", "set", "lo", "up"]).check()
        return name

    def runner(self, name: str) -> PrefixRunner:
        return netns(name)

    def run(self, name: str, argv: Sequence[str]) -> Result:
        return netns(name)(argv)

    def link(
        self,
        a: str,
        b: str,
        addr_a: str,
        addr_b: str,
        prefixlen: int = 24,
        dev_a: str | None = None,
        dev_b: str | None = None,
    ) -> tuple[str, str]:
        """A veth pair between namespaces a and b with an address on each end; returns the devices."""
        n = next(self._links)
        dev_a = dev_a or f"veth{n}"
        dev_b = dev_b or f"veth{n}"
        # Made in a's namespace and its peer moved at once, so no name is ever taken on the host.
        self.run(a, ["ip", "link", "add", dev_a, "type", "veth", "peer", "name", dev_b, "netns", b]).check()
        self.run(a, ["ip", "addr", "add", f"{addr_a}/{prefixlen}", "dev", dev_a]).check()
        self.run(b, ["ip", "addr", "add", f"{addr_b}/{prefixlen}", "dev", dev_b]).check()
        self.run(a, ["ip", "link", "set", dev_a, "up"]).check()
        self.run(b, ["ip", "link", "set", dev_b, "up"]).check()
        return dev_a, dev_b

    def close(self) -> None:
        errors = []
        while self.names:
            name = self.names.pop()
            # Processes still inside keep a namespace alive but unnamed; deleting the name is
            # what `ip netns list` (and the leftover check) sees.
            result = host()(["ip", "netns", "delete", name])
            if not result.ok and os.path.exists(os.path.join(NETNS_DIR, name)):
                errors.append(result.message)
        if errors:
            raise RuntimeError("could not delete namespaces: " + "; ".join(errors))


def leftover_namespaces(prefix: str = LAB_PREFIX) -> list[str]:
    """Lab namespaces that still exist on this host (all processes)."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


# ---- sockets inside a namespace -----------------------------------------------------------------------


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def socket_in(
    name: str, family: int = socket.AF_INET, type: int = socket.SOCK_DGRAM, timeout_s: float = 5.0
) -> socket.socket:
    """A socket created inside network namespace `name` (made with `ip netns add`)."""
    out: dict = {}

    def work() -> None:
        try:
            fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            out["sock"] = socket.socket(family, type)
        except BaseException as exc:  # handed to the caller's thread
            out["error"] = exc

    # This thread ends inside the other namespace; the caller's threads never leave theirs.
    thread = threading.Thread(target=work, name=f"setns-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "error" in out:
        raise out["error"]
    if "sock" not in out:
        raise TimeoutError(f"could not open a socket in namespace {name} within {timeout_s} s")
    return out["sock"]


def udp_one_way(
    src_ns: str,
    dst_ns: str,
    dst_ip: str,
    *,
    count: int = 200,
    port: int = 47000,
    interval_s: float = 0.0005,
    quiet_s: float = 0.3,
    limit_s: float = 10.0,
) -> int:
    """How many of `count` datagrams sent from namespace src_ns arrive at dst_ip:port in dst_ns.

    One-way on purpose: a round trip fails when either direction is cut, so it cannot tell a
    one-way partition from a two-way one. Bounded: sending takes count * interval_s, and the
    receiver stops after `quiet_s` without a datagram or `limit_s` in all.
    """
    rx = socket_in(dst_ns)
    tx = socket_in(src_ns)
    try:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        rx.bind((dst_ip, port))
        rx.settimeout(quiet_s)
        seen: set[int] = set()
        for i in range(count):
            try:
                tx.sendto(i.to_bytes(4, "big"), (dst_ip, port))
            except OSError:
                pass  # a local route error (host unreachable) counts as not delivered
            if interval_s:
                time.sleep(interval_s)
        deadline = time.monotonic() + limit_s
        for _ in range(count * 2 + 10):
            if time.monotonic() >= deadline:
                break
            try:
                data = rx.recv(64)
            except (TimeoutError, BlockingIOError):
                break
            if len(data) == 4:
                seen.add(int.from_bytes(data, "big"))
        return len(seen)
    finally:
        rx.close()
        tx.close()
