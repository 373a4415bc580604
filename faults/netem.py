"""Delay, jitter, loss, duplication, reordering (tc netem) and bandwidth limits (tbf, htb).

netem lives in the kernel module `sch_netem`, which many kernels (this project's CI machine among
them) do not have. It is detected, never assumed: `detect_qdisc("netem")` tries
`tc qdisc add dev lo root netem delay 1ms` in a throwaway network namespace and reads the answer
("Specified qdisc kind is unknown" means the kernel has no sch_netem and could not load it), and
adds what the kernel config and module lists say, for the report. Where netem is missing,
`Shaper.netem()` raises `Unavailable` with that reason; delay and jitter on UDP then come from
faults/nfqueue.py, and everything from the in-process fault layer.

Bandwidth limits need only tbf or htb, which are far more common:

- `Shaper.bandwidth(rate)`            a tbf root qdisc: everything leaving the device;
- `Shaper.bandwidth(rate, dst=IP)`    an htb class per destination (u32 filter on the destination
                                      address), so one directed link is slowed and the others not;
                                      netem options on such a link become a netem leaf of its class.

tc has no comments, so our qdiscs are recognised by their handle (`5b1a:`); heal and cleanup delete
only a root qdisc with that handle. tc shapes egress: apply it in the *sender's* namespace.
"""

from __future__ import annotations

import gzip
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass

from splitbrain.node.errors import BadInput

from .netns import Lab, Result, Runner, can_make_namespaces

HANDLE = "5b1a"  # our root qdisc's major handle (hex), how heal recognises it
DEFAULT_CLASS = "ffff"  # the htb class for traffic that no per-destination fault matches
UNLIMITED = "100gbit"

# A minimal, harmless instance of each qdisc kind, for probing.
PROBES = {
    "netem": ["netem", "delay", "1ms"],
    "tbf": ["tbf", "rate", "1mbit", "burst", "32kbit", "latency", "100ms"],
    "htb": ["htb", "default", "1"],
}
KCONFIG = {"netem": "CONFIG_NET_SCH_NETEM", "tbf": "CONFIG_NET_SCH_TBF", "htb": "CONFIG_NET_SCH_HTB"}


class Unavailable(BadInput, RuntimeError):
    """The kernel (or the namespace) lacks what a fault needs; the message says what and why."""


@dataclass(frozen=True)
class Detection:
    name: str
    available: bool
    detail: str


# ---- detection ---------------------------------------------------------------------------------------


def kernel_config(option: str) -> str | None:
    """'y', 'm', 'not set', or None when the running kernel's config cannot be read."""
    for path in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as fh:
                for line in fh:
                    if line.startswith(option + "="):
                        return line.strip().split("=", 1)[1]
                    if line.startswith(f"# {option} is not set"):
                        return "not set"
            return "not set"
        except OSError:
            continue
    return None


def module_hint(module: str) -> str:
    """What /proc/modules, /sys/module and the modules directory say about a module."""
    hints = []
    try:
        with open("/proc/modules") as fh:
            loaded = any(line.split()[0] == module for line in fh if line.strip())
        hints.append("loaded" if loaded else "not loaded")
    except OSError:
        hints.append("no /proc/modules (no loadable modules)")
    if os.path.isdir(f"/sys/module/{module}"):
        hints.append(f"/sys/module/{module} present")
    mod_dir = f"/lib/modules/{os.uname().release}"
    if not os.path.isdir(mod_dir):
        hints.append(f"no {mod_dir}")
    return ", ".join(hints)


def interpret_tc_error(kind: str, result: Result) -> str:
    text = (result.stderr or result.stdout).strip()
    if "qdisc kind is unknown" in text or ("No such file or directory" in text and "RTNETLINK" in text):
        return f"the kernel has no sch_{kind} and could not load it ({text.splitlines()[0]})"
    if "Operation not permitted" in text:
        return f"not permitted to add a qdisc here ({text.splitlines()[0]}): needs CAP_NET_ADMIN"
    return f"tc qdisc add {kind} failed: {result.message}"


def probe_qdisc(kind: str, runner: Runner, dev: str = "lo") -> tuple[bool, str]:
    """Try `tc qdisc add dev <dev> root <kind> ...` via runner, and remove it again."""
    added = runner(["tc", "qdisc", "add", "dev", dev, "root", *PROBES[kind]], timeout_s=10)
    if added.ok:
        runner(["tc", "qdisc", "del", "dev", dev, "root"], timeout_s=10)
        return True, f"tc qdisc add {kind} works"
    if added.returncode == 127:
        return False, "tc (iproute2) is not installed"
    return False, interpret_tc_error(kind, added)


def detect_qdisc(kind: str, runner: Runner | None = None) -> Detection:
    """Whether qdisc `kind` works: a real trial (in a throwaway netns unless a runner is given)."""
    config = kernel_config(KCONFIG[kind])
    notes = []
    if config is not None:
        notes.append(f"{KCONFIG[kind]} {config}")
    notes.append(f"sch_{kind}: {module_hint('sch_' + kind)}")
    if runner is not None:
        ok, why = probe_qdisc(kind, runner)
    else:
        can, why_not = can_make_namespaces()
        if not can:
            # No trial possible: report what the kernel config says, flagged as not tried.
            ok = config in ("y", "m")
            why = f"not tried ({why_not})"
        else:
            with Lab(prefix="sbxprobe") as lab:
                ok, why = probe_qdisc(kind, lab.runner(lab.add()))
    return Detection(kind, ok, "; ".join([why, *notes]))


def detect_netem(runner: Runner | None = None) -> Detection:
    return detect_qdisc("netem", runner)


# ---- shaping ------------------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value:g}ms"


def _pct(p: float) -> str:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a probability must be in [0, 1], got {p!r}")
    return f"{p * 100:g}%"


def netem_args(
    *,
    delay_ms: float = 0.0,
    jitter_ms: float = 0.0,
    loss: float = 0.0,
    duplicate: float = 0.0,
    reorder: float = 0.0,
    reorder_gap: int | None = None,
    correlation: float | None = None,
) -> list[str]:
    """netem's words for one set of impairments (reorder needs a delay, as netem requires)."""
    args: list[str] = []
    if delay_ms or jitter_ms or reorder:
        args += ["delay", _ms(delay_ms or (1 if reorder else 0))]
        if jitter_ms:
            args.append(_ms(jitter_ms))
            if correlation is not None:
                args.append(_pct(correlation))
    if loss:
        args += ["loss", "random", _pct(loss)]
    if duplicate:
        args += ["duplicate", _pct(duplicate)]
    if reorder:
        args += ["reorder", _pct(reorder)]
        if reorder_gap:
            args += ["gap", str(int(reorder_gap))]
    if not args:
        raise ValueError("no impairment given")
    return args


class Shaper:
    """tc on one device of one namespace: netem, tbf (whole device) or htb (per destination)."""

    def __init__(self, runner: Runner, dev: str, *, netem: bool | None = None):
        self.runner = runner
        self.dev = dev
        self._netem = netem
        self._netem_detail = ""
        self._classes: dict[str, int] = {}  # destination -> htb minor class number
        self._minor = itertools.count(0x10)

    def _tc(self, args: Sequence[str], check: bool = True) -> Result:
        result = self.runner(["tc", *args], timeout_s=10)
        if check and not result.ok:
            raise RuntimeError(f"tc {' '.join(args)}: {result.message}")
        return result

    def root_kind(self) -> str | None:
        """The kind of our root qdisc on the device ('tbf', 'htb', 'netem'), or None."""
        out = self._tc(["qdisc", "show", "dev", self.dev]).stdout
        for line in out.splitlines():
            words = line.split()
            if len(words) >= 4 and words[0] == "qdisc" and words[2] == f"{HANDLE}:" and "root" in words:
                return words[1]
        return None

    def netem_available(self) -> bool:
        if self._netem is None:
            ok, why = probe_qdisc("netem", self.runner)
            self._netem, self._netem_detail = ok, why
        return self._netem

    def netem(self, *, dst: str | None = None, rate: str | None = None, **impairments) -> None:
        """Delay/jitter/loss/duplicate/reorder on everything leaving the device, or to one dst."""
        args = netem_args(**impairments)
        if not self.netem_available():
            raise Unavailable(f"netem is not available: {self._netem_detail or 'detected as missing'}")
        if dst is None:
            if rate:
                args += ["rate", rate]
            self._tc(["qdisc", "replace", "dev", self.dev, "root", "handle", f"{HANDLE}:", "netem", *args])
            return
        minor = self._class_for(dst, rate or UNLIMITED)
        self._tc(
            [
                "qdisc",
                "replace",
                "dev",
                self.dev,
                "parent",
                f"{HANDLE}:{minor:x}",
                "handle",
                f"{minor:x}:",
                "netem",
                *args,
            ]
        )

    def bandwidth(self, rate: str, *, dst: str | None = None, burst: str = "32kbit", latency_ms: float = 400.0) -> None:
        """Limit the rate ('8mbit', '500kbit') of everything leaving the device, or to one dst."""
        if dst is None:
            self._tc(
                [
                    "qdisc",
                    "replace",
                    "dev",
                    self.dev,
                    "root",
                    "handle",
                    f"{HANDLE}:",
                    "tbf",
                    "rate",
                    rate,
                    "burst",
                    burst,
                    "latency",
                    _ms(latency_ms),
                ]
            )
            return
        self._class_for(dst, rate)

    def _class_for(self, dst: str, rate: str) -> int:
        kind = self.root_kind()
        if kind not in (None, "htb"):
            raise RuntimeError(f"{self.dev} already has a whole-device {kind} from splitbrain: heal it first")
        if kind is None:
            self._tc(["qdisc", "add", "dev", self.dev, "root", "handle", f"{HANDLE}:", "htb", "default", DEFAULT_CLASS])
            self._tc(
                [
                    "class",
                    "add",
                    "dev",
                    self.dev,
                    "parent",
                    f"{HANDLE}:",
                    "classid",
                    f"{HANDLE}:{DEFAULT_CLASS}",
                    "htb",
                    "rate",
                    UNLIMITED,
                ]
            )
            self._classes.clear()
        minor = self._classes.get(dst)
        verb = "change" if minor is not None else "add"
        if minor is None:
            minor = next(self._minor)
        self._tc(
            [
                "class",
                verb,
                "dev",
                self.dev,
                "parent",
                f"{HANDLE}:",
                "classid",
                f"{HANDLE}:{minor:x}",
                "htb",
                "rate",
                rate,
                "ceil",
                rate,
            ]
        )
        if dst not in self._classes:
            self._tc(
                [
                    "filter",
                    "add",
                    "dev",
                    self.dev,
                    "parent",
                    f"{HANDLE}:",
                    "protocol",
                    "ip",
                    "prio",
                    "1",
                    "u32",
                    "match",
                    "ip",
                    "dst",
                    f"{dst}/32",
                    "flowid",
                    f"{HANDLE}:{minor:x}",
                ]
            )
            self._classes[dst] = minor
        return minor

    def heal(self) -> bool:
        """Remove our root qdisc (and everything under it); True when there was one."""
        self._classes.clear()
        if self.root_kind() is None:
            return False
        self._tc(["qdisc", "del", "dev", self.dev, "root"])
        return True


def cleanup(runner: Runner) -> list[str]:
    """Remove our root qdisc from every device of a namespace; return the devices cleaned."""
    out = runner(["ip", "-o", "link", "show"], timeout_s=10)
    cleaned: list[str] = []
    if not out.ok:
        return cleaned
    for line in out.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        dev = parts[1].strip().split("@", 1)[0]
        if Shaper(runner, dev).heal():
            cleaned.append(dev)
    return cleaned
