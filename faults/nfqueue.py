"""Delay and jitter on UDP without netem: an NFQUEUE rule plus the userspace delayer.

    delays = NfqueueDelay(faults, runners)        # faults: an IptablesFaults; runners: name -> PrefixRunner
    fid = delays.delay("B", 50, jitter_ms=10, src="A")   # A -> B datagrams arrive 40-60 ms late
    delays.heal(fid)                              # rule removed first, then the delayer stopped

At the receiving host the rule `INPUT -p udp [-s A] [--dport P] -j NFQUEUE --queue-num N
--queue-bypass` (tagged like every other rule, so heal and cleanup find it) hands the packets to
`python -m splitbrain.faults.delayer --queue N`, started in the same namespace through the host's runner
(`ip netns exec`, or `nsenter -t <pid> -n` for a container: the delayer runs from the host's
Python with the `netfilterqueue` package, so the node image needs neither). `--queue-bypass`
keeps traffic flowing, undelayed, if the delayer is not running. The delay applies on INPUT, so it
adds to every path into the host; use `src` for one directed link.

`faults.capabilities` says whether this works here (netfilterqueue importable, the kernel's NFQUEUE
target, root), with the reason when it does not: then delay comes from the in-process fault layer.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from splitbrain.node.errors import RunFailed

from .iptables import IptablesFaults
from .netns import PrefixRunner

QUEUE_BASE = 4200  # queue numbers this module hands out: QUEUE_BASE, QUEUE_BASE + 1, ...
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
PROJECT_ROOT = str(Path(__file__).resolve().parents[1])


class NfqueueError(RunFailed, RuntimeError):
    pass


def netfilterqueue_importable() -> tuple[bool, str]:
    try:
        import netfilterqueue
    except ImportError as exc:
        return False, (
            f"the netfilterqueue package is not importable ({exc}); pip install netfilterqueue "
            "(its build needs Debian's libnetfilter-queue-dev)"
        )
    version = getattr(netfilterqueue, "__version__", "?")
    return True, f"netfilterqueue {version}"


@dataclass
class _Delay:
    fault_id: str
    host: str
    queue: int
    proc: subprocess.Popen


class NfqueueDelay:
    """UDP delay faults at named hosts, sharing the run id and tags of an IptablesFaults."""

    def __init__(self, faults: IptablesFaults, runners: Mapping[str, PrefixRunner], python: str = sys.executable):
        self.faults = faults
        self.runners = dict(runners)
        self.python = python
        self.delays: dict[str, _Delay] = {}
        self._queues = itertools.count(QUEUE_BASE)

    def delay(
        self,
        host: str,
        delay_ms: float,
        *,
        jitter_ms: float = 0.0,
        src: str | Sequence[str] | None = None,
        dport: int | None = None,
        seed: int = 0,
        fault_id: str | None = None,
    ) -> str:
        """Delay UDP arriving at `host` (from `src`, to port `dport`) by delay_ms +- jitter_ms."""
        runner = self.runners[host]
        queue = next(self._queues)
        proc = self._start(runner, queue, delay_ms, jitter_ms, seed)
        srcs = [None] if src is None else ([src] if isinstance(src, str) else list(src))
        fids: list[str] = []
        try:
            base = fault_id or f"delay{queue}"
            for i, s in enumerate(srcs):
                matches = ["-p", "udp"]
                if s is not None:
                    matches += ["-s", self.faults.hosts[s].address]
                if dport is not None:
                    matches += ["--dport", str(int(dport))]
                fid = base if len(srcs) == 1 else f"{base}.{i}"
                fids.append(
                    self.faults.add_rule(
                        host,
                        "INPUT",
                        matches,
                        ["-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"],
                        kind="delay",
                        fault_id=fid,
                    )
                )
        except Exception:
            for fid in fids:
                self.faults.heal(fid)
            self._stop(proc)
            raise
        for fid in fids:
            self.delays[fid] = _Delay(fid, host, queue, proc)
        return fids[0] if len(fids) == 1 else base

    def _start(
        self, runner: PrefixRunner, queue: int, delay_ms: float, jitter_ms: float, seed: int
    ) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = PROJECT_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [
            self.python,
            "-m",
            "splitbrain.faults.delayer",
            "--queue",
            str(queue),
            "--delay-ms",
            f"{delay_ms:g}",
            "--jitter-ms",
            f"{jitter_ms:g}",
            "--seed",
            str(seed),
        ]
        proc = runner.popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True
        )
        line = _read_line(proc, READY_TIMEOUT_S)
        try:
            info = json.loads(line) if line else {}
        except ValueError:
            info = {}
        if not info.get("ready"):
            self._stop(proc)
            err = info.get("error") or (proc.stderr.read() if proc.stderr else "") or line or "no answer"
            raise NfqueueError(f"delayer for queue {queue} did not start: {err.strip()}")
        return proc

    def heal(self, fault_id: str | None = None) -> None:
        """Remove one delay (or all of them): the rule first, so no packet waits for a dead queue."""
        fids = [fault_id] if fault_id is not None else list(self.delays)
        if fault_id is not None and fault_id not in self.delays:
            fids = [f for f in self.delays if f.startswith(fault_id + ".")]
        procs = []
        for fid in fids:
            entry = self.delays.pop(fid, None)
            self.faults.heal(fid)
            if entry is not None and entry.proc not in procs:
                procs.append(entry.proc)
        for proc in procs:
            if not any(d.proc is proc for d in self.delays.values()):
                self._stop(proc)

    def close(self) -> None:
        """Heal every delay and stop every delayer, whatever state they are in."""
        try:
            self.heal()
        finally:
            for entry in list(self.delays.values()):
                self._stop(entry.proc)
            self.delays.clear()

    @staticmethod
    def _stop(proc: subprocess.Popen) -> dict:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        out = proc.stdout.read() if proc.stdout else ""
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()
        for line in reversed(out.splitlines()):
            try:
                return json.loads(line)
            except ValueError:
                continue
        return {}


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """One line from proc's stdout within timeout_s ('' on timeout or exit)."""
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None, "started with stdout=PIPE"
    fd = proc.stdout.fileno()
    buf = b""
    while time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        if b"\n" in buf:
            return buf.split(b"\n", 1)[0].decode(errors="replace")
    return buf.decode(errors="replace")
